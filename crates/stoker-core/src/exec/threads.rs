//! The threads stages run on, kept between the stages that use them: a stage started again
//! (each pass of a `repeat`, each epoch, a restore) takes threads that are already there
//! instead of starting new ones, and a thread left idle for [`KEEP_IDLE`] ends.
//!
//! A thread takes the name of the stage it works for, on the system (what `top -H` and the
//! tuner's CPU measure see) and on the timeline.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};

/// How long an idle thread waits for work before it ends.
pub const KEEP_IDLE: Duration = Duration::from_secs(10);

/// A job: what to run, under which name, and where to say it is done.
struct Job {
    name: String,
    body: Box<dyn FnOnce() + Send>,
    done: Arc<Done>,
}

#[derive(Default)]
struct Done {
    flag: Mutex<bool>,
    cv: Condvar,
}

/// Marks its job done when dropped, also when the job panicked.
struct MarkDone(Arc<Done>);

impl Drop for MarkDone {
    fn drop(&mut self) {
        let mut flag = self.0.flag.lock().unwrap_or_else(|e| e.into_inner());
        *flag = true;
        self.0.cv.notify_all();
    }
}

/// A job that runs on a thread of the pool: wait for it with [`Handle::join`].
pub struct Handle {
    done: Arc<Done>,
}

impl Handle {
    /// Waits until the job has returned (or panicked).
    pub fn join(self) {
        let mut flag = self.done.flag.lock().unwrap_or_else(|e| e.into_inner());
        while !*flag {
            flag = self.done.cv.wait(flag).unwrap_or_else(|e| e.into_inner());
        }
    }

    pub fn is_finished(&self) -> bool {
        *self.done.flag.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The idle threads, each by the channel it takes its next job from.
static IDLE: Mutex<Vec<Sender<Job>>> = Mutex::new(Vec::new());
/// The process the idle threads belong to: a child made by `fork` has none of its parent's
/// threads, only the list of them.
static OWNER: AtomicU32 = AtomicU32::new(0);

/// Runs `body` on an idle thread, or on a new one, named `name`.
pub fn spawn(
    name: impl Into<String>,
    body: impl FnOnce() + Send + 'static,
) -> std::io::Result<Handle> {
    let done = Arc::new(Done::default());
    let job = Job {
        name: name.into(),
        body: Box::new(body),
        done: Arc::clone(&done),
    };
    {
        let mut idle = IDLE.lock().unwrap_or_else(|e| e.into_inner());
        let pid = std::process::id();
        if OWNER.swap(pid, Relaxed) != pid {
            // Forked: the threads on the list are the parent's. Their channels are left alone
            // (dropping a job would run its drop code here), and new threads start.
            std::mem::forget(std::mem::take(&mut *idle));
        }
        // Sent under the lock: a thread ending takes itself off the list under it, so a job
        // is either sent to a thread still on the list (which then finds it) or not at all.
        // An idle thread's channel is empty, so the send does not wait.
        if let Some(tx) = idle.pop() {
            if let Err(e) = tx.try_send(job) {
                return start(e.into_inner()).map(|()| Handle { done });
            }
            return Ok(Handle { done });
        }
    }
    start(job)?;
    Ok(Handle { done })
}

/// Starts a new thread with `job` as its first.
fn start(job: Job) -> std::io::Result<()> {
    let (tx, rx) = bounded::<Job>(1);
    let first_name = job.name.clone();
    let _ = tx.try_send(job);
    std::thread::Builder::new()
        .name(first_name)
        .spawn(move || serve(tx, rx))
        .map(|_| ())
}

/// A pool thread: runs its jobs, and goes back on the idle list after each, until it has
/// waited [`KEEP_IDLE`] for one.
fn serve(tx: Sender<Job>, rx: Receiver<Job>) {
    let mut name = String::new();
    loop {
        let job = match rx.recv_timeout(KEEP_IDLE) {
            Ok(job) => job,
            Err(RecvTimeoutError::Disconnected) => return,
            Err(RecvTimeoutError::Timeout) => {
                let mut idle = IDLE.lock().unwrap_or_else(|e| e.into_inner());
                idle.retain(|t| !t.same_channel(&tx));
                // A job sent before this thread left the list is in the channel now.
                match rx.try_recv() {
                    Ok(job) => job,
                    Err(_) => return,
                }
            }
        };
        if job.name != name {
            name.clone_from(&job.name);
            set_name(&name);
        }
        let done = MarkDone(job.done);
        // A stage catches its own panics; one that escapes ends this job, not the thread.
        let _ = std::panic::catch_unwind(AssertUnwindSafe(job.body));
        if cfg!(miri) {
            // Miri checks each test's threads end with it: one thread per job there.
            return;
        }
        // Back on the list before the job is marked done, so a job started right after this
        // one's `join` finds this thread instead of starting another; a job sent meanwhile
        // waits in the channel only until the mark below.
        {
            let mut idle = IDLE.lock().unwrap_or_else(|e| e.into_inner());
            if OWNER.load(Relaxed) == std::process::id() {
                idle.push(tx.clone());
            }
        }
        drop(done);
    }
}

/// Names the calling thread `name`: on the system (at most 15 bytes there) and on the
/// timeline.
fn set_name(name: &str) {
    crate::trace::name_thread(name);
    #[cfg(all(target_os = "linux", not(miri)))]
    {
        let mut bytes: Vec<u8> = name.bytes().filter(|&b| b != 0).take(15).collect();
        bytes.push(0);
        // SAFETY: `bytes` is a NUL-terminated string of at most 16 bytes, as PR_SET_NAME
        // reads; it outlives the call.
        unsafe {
            libc::prctl(libc::PR_SET_NAME, bytes.as_ptr() as libc::c_ulong, 0, 0, 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os_name() -> String {
        std::fs::read_to_string("/proc/thread-self/comm")
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    }

    #[test]
    fn a_thread_is_used_again_and_named_for_each_job() {
        let (tx, rx) = std::sync::mpsc::channel();
        let t = tx.clone();
        spawn("stoker-test-a", move || {
            let _ = t.send((std::thread::current().id(), os_name()));
        })
        .unwrap()
        .join();
        let (first, name_a) = rx.recv().unwrap();
        // Jobs that come one after another run on threads already there.
        let mut seen = std::collections::HashSet::new();
        for _ in 0..20 {
            let t = tx.clone();
            spawn("stoker-test-b", move || {
                let _ = t.send((std::thread::current().id(), os_name()));
            })
            .unwrap()
            .join();
            let (id, name) = rx.recv().unwrap();
            if cfg!(target_os = "linux") {
                assert_eq!(name, "stoker-test-b");
            }
            seen.insert(id);
        }
        if cfg!(target_os = "linux") {
            assert_eq!(name_a, "stoker-test-a");
        }
        // Other tests' jobs may take a thread at the same time, so not always `first`.
        assert!(
            seen.len() <= 4,
            "{} threads for 20 jobs one after another",
            seen.len()
        );
        let _ = first;
    }

    #[test]
    fn a_panicking_job_is_done_and_its_thread_goes_on() {
        let h = spawn("stoker-test-p", || panic!("boom")).unwrap();
        h.join();
        let (tx, rx) = std::sync::mpsc::channel();
        spawn("stoker-test-q", move || {
            let _ = tx.send(1);
        })
        .unwrap()
        .join();
        assert_eq!(rx.recv().unwrap(), 1);
    }

    #[test]
    fn jobs_at_once_get_threads_of_their_own() {
        let barrier = Arc::new(std::sync::Barrier::new(6));
        let handles: Vec<Handle> = (0..6)
            .map(|i| {
                let b = Arc::clone(&barrier);
                spawn(format!("stoker-test-{i}"), move || {
                    b.wait();
                })
                .unwrap()
            })
            .collect();
        for h in handles {
            h.join();
        }
    }
}
