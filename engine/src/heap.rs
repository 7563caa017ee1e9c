//! Hands the heap's free pages back to the operating system.
//!
//! Loading a model builds large temporary structures (the tokenizer's merge list, the file's
//! metadata arrays) and frees them before the weights arrive. glibc keeps freed small allocations in
//! its arenas, where they count towards the process's resident memory, so a load would peak at the
//! weights plus that garbage. Trimming after each temporary phase returns those pages at once.

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
