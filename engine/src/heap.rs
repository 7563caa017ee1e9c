//! How the engine's heap meets the operating system's pages.
//!
//! Loading a model builds large temporary structures (the tokenizer's merge list, the file's
//! metadata arrays) and frees them before the weights arrive. glibc keeps freed small allocations in
//! its arenas, where they count towards the process's resident memory, so a load would peak at the
//! weights plus that garbage. Trimming after each temporary phase returns those pages at once.
//!
//! The weights themselves are read once per generated token, front to back. In 4 KiB pages, an
//! 8B model's 5 GB is over a million translations a token, most of them missing the TLB; in 2 MiB
//! pages it is a few thousand. Linux gives transparent huge pages to the ranges a process asks for
//! (the default `madvise` setting), so the weights' buffers ask before they are filled.

#![allow(unsafe_code)]

/// Returns every whole free page of the heap to the operating system (glibc's `malloc_trim`); a
/// no-op with other allocators.
pub fn release_free_pages() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks glibc's own arenas; it takes no pointers from us.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The size of a huge page, where the kernel backs a range with them.
const HUGE_PAGE: usize = 2 << 20;

/// An empty vector with room for `capacity` values, in huge pages where the system gives them
/// ([`advise_huge_pages`]).
pub fn huge_page_vec<T>(capacity: usize) -> Vec<T> {
    let mut values = Vec::with_capacity(capacity);
    advise_huge_pages(&mut values);
    values
}

/// Asks the kernel to back the spare capacity of `buffer` with huge pages when it is first touched.
/// Only the whole 2 MiB pages inside the allocation are advised, so smaller buffers are left alone;
/// call it before filling, since pages already touched stay small. A no-op off Linux, and a refusal
/// (huge pages disabled) only costs the speed-up.
pub fn advise_huge_pages<T>(buffer: &mut Vec<T>) {
    #[cfg(target_os = "linux")]
    {
        let spare = buffer.spare_capacity_mut();
        let start = spare.as_ptr() as usize;
        let end = start + size_of_val(spare);
        let (first, last) = (
            start.next_multiple_of(HUGE_PAGE),
            end / HUGE_PAGE * HUGE_PAGE,
        );
        if last <= first {
            return;
        }
        // SAFETY: `first..last` lies inside `buffer`'s own allocation, which holds no values there
        // yet; the advice changes how its pages are backed, never their contents.
        let status = unsafe {
            libc::madvise(
                first as *mut libc::c_void,
                last - first,
                libc::MADV_HUGEPAGE,
            )
        };
        if status != 0 {
            tracing::debug!(
                error = %std::io::Error::last_os_error(),
                "huge pages refused for a weight buffer"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advice_leaves_the_buffer_usable() {
        let mut small: Vec<u8> = Vec::with_capacity(100);
        advise_huge_pages(&mut small);
        small.extend(0..100);
        let mut large: Vec<u32> = Vec::with_capacity(3 * HUGE_PAGE);
        advise_huge_pages(&mut large);
        large.extend(0..3 * HUGE_PAGE as u32);
        assert_eq!(small[99], 99);
        assert_eq!(large.iter().map(|&v| u64::from(v)).sum::<u64>(), {
            let n = 3 * HUGE_PAGE as u64;
            n * (n - 1) / 2
        });
    }
}
