//! The pool's threads held together for one small forward pass.
//!
//! A decode step is some 150 small parallel loops (every matrix of every layer, the attention heads,
//! the output head), each a few microseconds per thread. Run as rayon fork-joins, the idle workers fall
//! asleep between them and every loop pays a wake-up. A [`Team`] instead keeps the helpers spinning for
//! the length of the pass: the calling thread runs the pass and publishes each loop; every member claims
//! the loop's tasks from one atomic word until none are left.
//!
//! A helper that never arrives (its thread busy elsewhere) costs speed, never progress: the calling
//! thread claims whatever is left, and waits only for tasks that were claimed.
#![allow(unsafe_code)]

use std::{
    cell::UnsafeCell,
    hint,
    ops::Range,
    panic::{self, AssertUnwindSafe},
    sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    thread,
};

use rayon::prelude::*;

/// Bits of the state word for the next task to claim and for the loop's task count; the rest count
/// loops.
const INDEX_BITS: u32 = 20;
const INDEX_MASK: u64 = (1 << INDEX_BITS) - 1;
/// Most tasks one loop can hand out; a larger loop runs on the calling thread alone.
const MAX_TASKS: usize = INDEX_MASK as usize;
/// Spins between looks at the state word before a waiting helper yields its core.
const SPINS_BEFORE_YIELD: u32 = 1 << 14;

/// One loop's body, its lifetime erased while it is published (see [`Team::run`]).
type Job = *const (dyn Fn(usize) + Sync);

/// Threads sharing the loops of one pass; made by [`with_team`].
pub struct Team {
    /// Loop number (high bits), task count and next task to claim (two fields of [`INDEX_BITS`]).
    state: AtomicU64,
    /// Tasks of the current loop finished so far.
    done: AtomicUsize,
    /// The current loop's body: written by the calling thread before it publishes the loop, read by
    /// a member only after it has claimed one of that loop's tasks.
    job: UnsafeCell<Option<Job>>,
    /// Set when the pass is over: waiting helpers leave.
    closed: AtomicBool,
    members: usize,
}

// SAFETY: the job cell is written only by the thread that owns the team while no task of the previous
// loop is unfinished, and read only by a member holding an unfinished task of the current loop (see
// `Team::run` and `Team::claim`); every other field is atomic.
unsafe impl Sync for Team {}

impl Team {
    fn new(members: usize) -> Self {
        Self {
            state: AtomicU64::new(0),
            done: AtomicUsize::new(0),
            job: UnsafeCell::new(None),
            closed: AtomicBool::new(false),
            members,
        }
    }

    /// Runs `f(0)`, ..., `f(tasks - 1)` across the team and returns when all have finished.
    pub fn run(&self, tasks: usize, f: &(dyn Fn(usize) + Sync)) {
        if tasks <= 1 || tasks > MAX_TASKS || self.members <= 1 {
            (0..tasks).for_each(f);
            return;
        }
        // SAFETY: lifetime erasure only. The pointer is dropped from use before this call returns:
        // members read it only while holding an unfinished task of this loop, and this call waits for
        // every task to finish.
        let job: Job = unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync), Job>(f) };
        // SAFETY: every task of the previous loop has finished (its `run` waited for them), so no
        // member is reading the cell; members that claim a task of the new loop read it after the
        // release store below.
        unsafe { *self.job.get() = Some(job) };
        self.done.store(0, Ordering::Relaxed);
        let epoch = (self.state.load(Ordering::Relaxed) >> (2 * INDEX_BITS)) + 1;
        let word = (epoch << (2 * INDEX_BITS)) | ((tasks as u64) << INDEX_BITS);
        self.state.store(word, Ordering::Release);
        while self.work_one() {}
        let mut spins = 0u32;
        while self.done.load(Ordering::Acquire) < tasks {
            spins = pause(spins);
        }
    }

    /// Claims and runs one task of the current loop; `false` when none is left to claim.
    fn work_one(&self) -> bool {
        let Some(index) = self.claim() else {
            return false;
        };
        // SAFETY: this member holds unfinished task `index` of the current loop, so the loop's `run`
        // is still waiting and its job (published before the state word this claim saw) is alive.
        let job = unsafe { (*self.job.get()).unwrap_unchecked() };
        let finish = Finish(&self.done);
        // SAFETY: as above, the body outlives this task.
        unsafe { (*job)(index) };
        drop(finish);
        true
    }

    /// Takes the next task of the current loop, if any.
    fn claim(&self) -> Option<usize> {
        let mut word = self.state.load(Ordering::Acquire);
        loop {
            let tasks = (word >> INDEX_BITS) & INDEX_MASK;
            let next = word & INDEX_MASK;
            if next >= tasks {
                return None;
            }
            match self.state.compare_exchange_weak(
                word,
                word + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(next as usize),
                Err(now) => word = now,
            }
        }
    }

    /// A helper's life: claim tasks as loops appear, until the pass is over.
    fn help(&self) {
        let mut spins = 0u32;
        while !self.closed.load(Ordering::Acquire) {
            if self.work_one() {
                spins = 0;
            } else {
                spins = pause(spins);
            }
        }
    }

    /// Runs `f(i, chunk)` for every `chunk`-long piece of `out` (the last may be shorter).
    pub fn chunks_mut<T: Send>(
        &self,
        out: &mut [T],
        chunk: usize,
        f: impl Fn(usize, &mut [T]) + Sync,
    ) {
        let chunk = chunk.max(1);
        let len = out.len();
        let base = SendPtr(out.as_mut_ptr());
        self.run(len.div_ceil(chunk), &|i| {
            let start = i * chunk;
            let piece = chunk.min(len - start);
            // SAFETY: task `i` alone covers `start..start + piece`, inside `out`, which this call
            // borrows mutably until every task has finished.
            let part = unsafe { std::slice::from_raw_parts_mut(base.get().add(start), piece) };
            f(i, part);
        });
    }
}

/// Marks a task finished when dropped, so that a panicking task does not leave the caller waiting.
struct Finish<'a>(&'a AtomicUsize);

impl Drop for Finish<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Release);
    }
}

/// A base pointer handed to the tasks of one loop, each of which touches its own range.
struct SendPtr<T>(*mut T);

impl<T> Clone for SendPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for SendPtr<T> {}

// SAFETY: the tasks sharing the pointer write disjoint ranges (see `Team::chunks_mut`).
unsafe impl<T: Send> Sync for SendPtr<T> {}
// SAFETY: as for `Sync`: each task owns its range for as long as it runs.
unsafe impl<T: Send> Send for SendPtr<T> {}

impl<T> SendPtr<T> {
    fn get(self) -> *mut T {
        self.0
    }
}

/// One wait step: spin, then now and then give the core away.
fn pause(spins: u32) -> u32 {
    if spins >= SPINS_BEFORE_YIELD {
        thread::yield_now();
        0
    } else {
        hint::spin_loop();
        spins + 1
    }
}

/// Runs `body` with a team of the current rayon pool's threads; call it from inside the pool.
/// Helpers join as the pool hands them the work and leave when `body` returns.
pub fn with_team<R: Send>(body: impl FnOnce(&Team) -> R + Send) -> R {
    let members = rayon::current_num_threads().max(1);
    let team = Team::new(members);
    if members == 1 {
        return body(&team);
    }
    let (result, ()) = rayon::join(
        || {
            let result = panic::catch_unwind(AssertUnwindSafe(|| body(&team)));
            team.closed.store(true, Ordering::Release);
            result
        },
        || helpers(&team, members - 1),
    );
    match result {
        Ok(value) => value,
        Err(payload) => panic::resume_unwind(payload),
    }
}

/// Starts `count` helpers of `team` on the pool.
fn helpers(team: &Team, count: usize) {
    match count {
        0 => {}
        1 => team.help(),
        _ => {
            rayon::join(|| team.help(), || helpers(team, count - 1));
        }
    }
}

/// How a parallel loop of a forward pass runs: as rayon fork-joins on the pool, on a [`Team`], or on
/// the calling thread alone (inside a team's task, whose loops must not nest).
#[derive(Clone, Copy)]
pub enum Split<'a> {
    /// Fork-joins on the current rayon pool.
    Pool,
    /// Tasks claimed by the members of a team.
    Team(&'a Team),
    /// One task after another on the calling thread.
    Here,
}

impl Split<'_> {
    /// Threads that may share a loop.
    pub fn threads(self) -> usize {
        match self {
            Split::Pool => rayon::current_num_threads(),
            Split::Team(team) => team.members,
            Split::Here => 1,
        }
    }

    /// Runs `f(i, chunk)` for every `chunk`-long piece of `out`, in parallel.
    pub fn chunks_mut<T: Send>(
        self,
        out: &mut [T],
        chunk: usize,
        f: impl Fn(usize, &mut [T]) + Sync + Send,
    ) {
        match self {
            Split::Pool => out
                .par_chunks_mut(chunk.max(1))
                .enumerate()
                .for_each(|(i, part)| f(i, part)),
            Split::Team(team) => team.chunks_mut(out, chunk, f),
            Split::Here => out
                .chunks_mut(chunk.max(1))
                .enumerate()
                .for_each(|(i, part)| f(i, part)),
        }
    }

    /// Runs `f(i, part)` for each part `bounds[i]..bounds[i + 1]` of `out`, in parallel. `bounds` must
    /// rise and end within `out`; when they do not, nothing runs and the first bad bound is returned.
    pub fn parts_mut<T: Send>(
        self,
        out: &mut [T],
        bounds: &[usize],
        f: impl Fn(usize, &mut [T]) + Sync + Send,
    ) -> Result<(), Range<usize>> {
        if let Some(bad) = bounds.windows(2).find(|w| w[0] > w[1] || w[1] > out.len()) {
            return Err(bad[0]..bad[1]);
        }
        let parts = bounds.len().saturating_sub(1);
        let base = SendPtr(out.as_mut_ptr());
        let task = |i: usize| {
            let range = bounds[i]..bounds[i + 1];
            // SAFETY: the bounds rise and end within `out` (checked above), so the parts are
            // disjoint; `out` stays borrowed mutably until every task has finished.
            let part =
                unsafe { std::slice::from_raw_parts_mut(base.get().add(range.start), range.len()) };
            f(i, part);
        };
        match self {
            Split::Pool => (0..parts).into_par_iter().for_each(task),
            Split::Team(team) => team.run(parts, &task),
            Split::Here => (0..parts).for_each(task),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(threads: usize) -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("test pool")
    }

    #[test]
    fn every_task_of_every_loop_runs_exactly_once() {
        for threads in [1, 2, 3] {
            let counts: Vec<AtomicUsize> = (0..1000).map(|_| AtomicUsize::new(0)).collect();
            pool(threads).install(|| {
                with_team(|team| {
                    for tasks in [0, 1, 2, 7, 64, 1000] {
                        team.run(tasks, &|i| {
                            counts[i].fetch_add(1, Ordering::Relaxed);
                        });
                    }
                })
            });
            let expected = |i: usize| [1, 2, 7, 64, 1000].iter().filter(|&&t| i < t).count();
            for (i, c) in counts.iter().enumerate() {
                assert_eq!(
                    c.load(Ordering::Relaxed),
                    expected(i),
                    "task {i}, {threads} threads"
                );
            }
        }
    }

    #[test]
    fn chunks_cover_the_slice_once_with_their_indices() {
        pool(2).install(|| {
            with_team(|team| {
                for (len, chunk) in [(0, 4), (1, 4), (63, 8), (64, 8), (65, 8), (1000, 7)] {
                    let mut out = vec![usize::MAX; len];
                    Split::Team(team).chunks_mut(&mut out, chunk, |i, part| {
                        for (j, v) in part.iter_mut().enumerate() {
                            *v = i * chunk + j;
                        }
                    });
                    assert!(
                        out.iter().enumerate().all(|(i, &v)| i == v),
                        "{len} by {chunk}"
                    );
                }
            })
        });
    }

    #[test]
    fn parts_follow_their_bounds_and_bad_bounds_are_refused() {
        let mut out = vec![0usize; 10];
        pool(2).install(|| {
            with_team(|team| {
                for split in [Split::Pool, Split::Team(team), Split::Here] {
                    out.fill(0);
                    split
                        .parts_mut(&mut out, &[0, 3, 3, 9], |i, part| part.fill(i + 1))
                        .expect("rising bounds");
                    assert_eq!(out, [1, 1, 1, 3, 3, 3, 3, 3, 3, 0]);
                    let falling = split.parts_mut(&mut out, &[0, 5, 4], |_, _| {});
                    assert_eq!(falling.map_err(|r| (r.start, r.end)), Err((5, 4)));
                    assert_eq!(split.parts_mut(&mut out, &[0, 11], |_, _| {}), Err(0..11));
                }
            })
        });
    }

    #[test]
    fn a_pass_finishes_when_no_helper_arrives() {
        // One thread in the pool: the helper job can only run after the body, so the caller must do
        // every task itself.
        let total = AtomicUsize::new(0);
        pool(1).install(|| {
            let team = Team::new(2);
            let (_, ()) = rayon::join(
                || {
                    team.run(100, &|i| {
                        total.fetch_add(i, Ordering::Relaxed);
                    });
                    team.closed.store(true, Ordering::Release);
                },
                || team.help(),
            );
        });
        assert_eq!(total.load(Ordering::Relaxed), 4950);
    }

    #[test]
    fn a_panicking_task_reaches_the_caller() {
        let result = panic::catch_unwind(|| {
            pool(2).install(|| {
                with_team(|team| team.run(8, &|i| assert!(i != 5, "task five fails")));
            })
        });
        assert!(result.is_err());
    }
}
