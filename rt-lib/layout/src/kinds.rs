//! The closed sets of values the file and the runtime store in `u32` fields: object kinds,
//! thread states, how a thread ended, how a process image ended, the wrapped thread-library, process and signal functions, timer operations,
//! clock sources, column states, control-file outcomes and request kinds.
//!
//! Each is a `#[repr(u32)]` enum declared once with [`u32_enum!`], which gives it its value
//! (`as u32`), `from_u32` (for values read from a file, which may be anything), its name as
//! reports and specs spell it, and `ALL`. On-file fields stay `u32` (a reader must survive a
//! value it does not know); the `OBJ_*`, `STATE_*`, … constants at the crate root are aliases
//! derived from these enums for code written before them.

/// Declares a `#[repr(u32)]` enum with `ALL`, `from_u32`, `name` and `from_name`.
macro_rules! u32_enum {
    ($(#[$m:meta])* pub enum $name:ident { $($(#[$vm:meta])* $var:ident = $val:literal => $text:literal),* $(,)? }) => {
        $(#[$m])*
        #[repr(u32)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($(#[$vm])* $var = $val),* }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: [$name; [$($val),*].len()] = [$($name::$var),*];

            /// The value stored as `v`, if it is one.
            pub const fn from_u32(v: u32) -> Option<$name> {
                match v {
                    $($val => Some($name::$var),)*
                    _ => None,
                }
            }

            /// The name reports, specs and control files use.
            pub const fn name(self) -> &'static str {
                match self {
                    $($name::$var => $text),*
                }
            }

            /// The value named `name`.
            pub fn from_name(name: &str) -> Option<$name> {
                $name::ALL.into_iter().find(|v| v.name() == name)
            }
        }
    };
}
pub(crate) use u32_enum;

u32_enum! {
    /// `SyncObject::kind` and `WaitEntry::kind` (0: the entry is not complete yet).
    pub enum ObjectKind {
        Mutex = 1 => "mutex",
        Condvar = 2 => "condvar",
        Rwlock = 3 => "rwlock",
        Semaphore = 4 => "semaphore",
        Barrier = 5 => "barrier",
        /// A thread, as the object of `pthread_join`.
        Thread = 6 => "thread",
    }
}

u32_enum! {
    /// Thread states (JIS Table 1): `ColumnHeader::thread_state`, `Transition::state`, and
    /// the index of `ColumnHeader::state_ticks`.
    pub enum ThreadState {
        Run = 0 => "RUN",
        BlockedMutex = 1 => "BLOCKED_MUTEX",
        BlockedCondvar = 2 => "BLOCKED_CONDVAR",
        BlockedRwlock = 3 => "BLOCKED_RWLOCK",
        BlockedSemaphore = 4 => "BLOCKED_SEMAPHORE",
        BlockedJoin = 5 => "BLOCKED_JOIN",
        BlockedBarrier = 6 => "BLOCKED_BARRIER",
        Exited = 7 => "EXITED",
    }
}

u32_enum! {
    /// `ColumnHeader::exit_kind`: how the thread ended, as far as the runtime saw.
    pub enum ExitKind {
        Unknown = 0 => "unknown",
        /// The start routine returned (`exit_value` is its result).
        Returned = 1 => "returned",
        /// The thread called `pthread_exit` (`exit_value` is its argument).
        PthreadExit = 2 => "pthread_exit",
        /// A join returned `PTHREAD_CANCELED` for it (its end time is the join's).
        Canceled = 3 => "canceled",
    }
}

u32_enum! {
    /// `FileHeader::end_how`: how a process image ended (D22), as far as it was recorded.
    /// Who records what:
    /// - `exec`: the next image of the same process marks the one it replaced;
    /// - `exit`: the image itself, when `main` returns (the thunk of `__libc_start_main`
    ///   substitutes a main thunk), or when it calls `exit`, `_exit`, `_Exit` or
    ///   `syscall(SYS_exit_group, n)` (from any thread), wrapped imports or, in a static
    ///   program, wrapped functions ([`ProcessFn`]);
    /// - `exit` or `signal`: the parent, when it is a rewritten program that reaps the child
    ///   with `wait`, `waitpid`, `wait4` or `waitid`, or `stint run` for the program it
    ///   started; the parent's view wins (it is what the kernel reported), so a death by a
    ///   signal is recorded there.
    ///
    /// An image with no record either still runs or ended unseen (was killed, or ended in a
    /// way no wrapper sees, and nobody that records reaped it): a reader tells those apart by whether the
    /// process is still there.
    pub enum ProcessEnd {
        /// No end recorded: still running, or ended unseen.
        Running = 0 => "running",
        /// Exited (`FileHeader::end_status` holds the status).
        Exit = 1 => "exit",
        /// Killed by a signal (`FileHeader::end_status` holds the signal).
        Signal = 2 => "signal",
        /// Replaced by another image through `exec` in the same process.
        Exec = 3 => "exec",
    }
}

u32_enum! {
    /// The process functions the rewriter wraps (D22), `WrapSite::func` like [`WrappedFn`]'s
    /// but from 64 up: the ends of a process (`exit`, `_exit`, `_Exit`, `main`'s return through
    /// `__libc_start_main`, `syscall(SYS_exit_group)`: the image records its status) and the reaping of a child (`wait*`: the parent records how the child ended,
    /// in the child's profile). Their wrappers run whatever the metrics' gates say: they
    /// measure nothing, they record.
    pub enum ProcessFn {
        Exit = 64 => "exit",
        UnderscoreExit = 65 => "_exit",
        CapitalExit = 66 => "_Exit",
        Wait = 67 => "wait",
        Waitpid = 68 => "waitpid",
        Wait4 = 69 => "wait4",
        Waitid = 70 => "waitid",
        /// The C library's start (`_start` calls it with `main`): its thunk hands it a
        /// runtime thunk in place of `main`, which records `main`'s return value as the
        /// image's exit status (D22), seen by no parent when the parent is not rewritten.
        StartMain = 71 => "__libc_start_main",
        /// `syscall(2)`: its thunk compares the number with `SYS_exit_group` (one compare per
        /// call) and records the status of `syscall(SYS_exit_group, n)`; every other call
        /// goes straight to the real function.
        Syscall = 72 => "syscall",
    }
}

u32_enum! {
    /// The thread-library functions the rewriter wraps (D4), `WrapSite::func`; the name is
    /// the function's. In a dynamic program their PLT stubs jump to a wrapper; in a static
    /// one their entries do.
    pub enum WrappedFn {
        PthreadCreate = 1 => "pthread_create",
        PthreadExit = 2 => "pthread_exit",
        PthreadJoin = 3 => "pthread_join",
        MutexLock = 4 => "pthread_mutex_lock",
        MutexTimedlock = 5 => "pthread_mutex_timedlock",
        MutexTrylock = 6 => "pthread_mutex_trylock",
        MutexUnlock = 7 => "pthread_mutex_unlock",
        CondWait = 8 => "pthread_cond_wait",
        CondTimedwait = 9 => "pthread_cond_timedwait",
        CondSignal = 10 => "pthread_cond_signal",
        CondBroadcast = 11 => "pthread_cond_broadcast",
        RwlockRdlock = 12 => "pthread_rwlock_rdlock",
        RwlockWrlock = 13 => "pthread_rwlock_wrlock",
        RwlockTimedrdlock = 14 => "pthread_rwlock_timedrdlock",
        RwlockTimedwrlock = 15 => "pthread_rwlock_timedwrlock",
        RwlockUnlock = 16 => "pthread_rwlock_unlock",
        SemWait = 17 => "sem_wait",
        SemTimedwait = 18 => "sem_timedwait",
        SemPost = 19 => "sem_post",
        BarrierWait = 20 => "pthread_barrier_wait",
        SetnameNp = 21 => "pthread_setname_np",
        TimedjoinNp = 22 => "pthread_timedjoin_np",
        RwlockTryrdlock = 23 => "pthread_rwlock_tryrdlock",
        RwlockTrywrlock = 24 => "pthread_rwlock_trywrlock",
        SemTrywait = 25 => "sem_trywait",
        CondClockwait = 26 => "pthread_cond_clockwait",
    }
}

u32_enum! {
    /// What a timer routine does at a point (the operand the trampolines pass to the runtime's
    /// timer slow path).
    pub enum TimerOp {
        /// A function's entry: push a frame.
        Enter = 0 => "enter",
        /// A function's exit: pop the frame and add its time.
        Exit = 1 => "exit",
        /// An entry of a sampled point not timed this time: push a frame with no clock.
        EnterUntimed = 2 => "enter-untimed",
    }
}

u32_enum! {
    /// `ColumnHeader::clock_source`: how the thread's CPU time is read (D11).
    pub enum ClockSource {
        /// No timer event yet.
        None = 0 => "none",
        /// A perf task-clock event's page tells when the thread was scheduled in; between two
        /// schedulings CPU time advances with the TSC.
        PerfTsc = 1 => "perf-task-clock+tsc",
        /// Perf events refused: every timer event reads CLOCK_THREAD_CPUTIME_ID (a syscall).
        Syscall = 2 => "clock_gettime",
        /// The thread's rseq area tells when it was scheduled out (the kernel clears the
        /// `rseq_cs` descriptor the runtime armed, at the return to user space after every
        /// context switch and signal); between two such clears CPU time advances with the TSC,
        /// and a re-synchronisation reads CLOCK_THREAD_CPUTIME_ID (where the perf page would
        /// not offer `cap_user_time` either, without the kernel's work on a perf event at every
        /// switch; issue 14).
        Rseq = 3 => "rseq+tsc",
        /// The process measures no CPU time (`CFG_NO_CPU_CLOCK`): no switch detector and no
        /// re-synchronisation; the timers read the TSC alone.
        WallOnly = 4 => "wall-only",
    }
}

u32_enum! {
    /// `ColumnHeader::state`.
    pub enum ColumnState {
        Empty = 0 => "empty",
        /// Complete (published with release ordering).
        Live = 1 => "live",
    }
}

u32_enum! {
    /// `Control::control_file`: what the runtime did with `STINT_CONTROL` at start.
    pub enum ControlFileStatus {
        None = 0 => "none",
        /// Read and applied (`control_message` holds the path).
        Applied = 1 => "applied",
        /// Rejected: every metric is off (`control_message` says why).
        Rejected = 2 => "rejected",
        /// Ignored: setuid or AT_SECURE process.
        Ignored = 3 => "ignored",
    }
}

u32_enum! {
    /// `Request::op`: what a request on the control page's ring asks.
    pub enum RequestOp {
        /// Each live thread, at its next safe point, copies its counters, waits and state
        /// times into its baseline (open frames and the open state counted up to that moment).
        Snapshot = 1 => "snapshot",
        /// Each live thread, at its next safe point, applies `Control::sampling_off` to its
        /// points' sampling states (a program rewritten with sampling; `stint ctl … sampling`).
        Sampling = 2 => "sampling",
    }
}

u32_enum! {
    /// The signal functions the rewriter wraps in a program that has trap sites (D3, issue
    /// 12), `WrapSite::func` like [`WrappedFn`]'s but from 96 up: the runtime keeps SIGTRAP
    /// unblocked and its own handler installed while making the program see what it asked
    /// for (`rt-lib/src/signals.rs`). Like [`ProcessFn`]s they measure nothing and run
    /// whatever the metrics' gates say. glibc's `__sigaction` and `__sysv_signal` are aliases
    /// a static program's symbol table also has: they are wrapped under the public name.
    pub enum SignalFn {
        Sigprocmask = 96 => "sigprocmask",
        PthreadSigmask = 97 => "pthread_sigmask",
        Sigaction = 98 => "sigaction",
        Signal = 99 => "signal",
        BsdSignal = 100 => "bsd_signal",
        Ssignal = 101 => "ssignal",
        SysvSignal = 102 => "sysv_signal",
        Sigsuspend = 103 => "sigsuspend",
        Ppoll = 104 => "ppoll",
        Sigblock = 105 => "sigblock",
        Sigsetmask = 106 => "sigsetmask",
        Siggetmask = 107 => "siggetmask",
        Sighold = 108 => "sighold",
        Sigrelse = 109 => "sigrelse",
        Sigignore = 110 => "sigignore",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_names_and_round_trips() {
        for s in ThreadState::ALL {
            assert_eq!(ThreadState::from_u32(s as u32), Some(s));
            assert_eq!(ThreadState::from_name(s.name()), Some(s));
        }
        assert_eq!(ThreadState::ALL.len(), 8);
        assert_eq!(ThreadState::from_u32(8), None);
        assert_eq!(WrappedFn::from_name("pthread_cond_clockwait"), Some(WrappedFn::CondClockwait));
        assert_eq!(WrappedFn::ALL.len(), 26);
        assert!(WrappedFn::ALL.iter().enumerate().all(|(i, w)| *w as usize == i + 1));
        assert_eq!(ObjectKind::from_u32(0), None);
        assert_eq!((TimerOp::Enter as u32, TimerOp::Exit as u32), (0, 1));
        // Process functions never share an id with a thread-library one.
        assert!(ProcessFn::ALL.iter().all(|p| WrappedFn::from_u32(*p as u32).is_none()));
        assert!(ProcessFn::ALL.iter().all(|p| WrappedFn::from_name(p.name()).is_none()));
        assert_eq!(ProcessFn::from_name("_Exit"), Some(ProcessFn::CapitalExit));
        assert_eq!(ProcessFn::from_name("__libc_start_main"), Some(ProcessFn::StartMain));
        // Signal functions share no id or name with the others.
        assert!(SignalFn::ALL.iter().all(|f| WrappedFn::from_u32(*f as u32).is_none()));
        assert!(SignalFn::ALL.iter().all(|f| ProcessFn::from_u32(*f as u32).is_none()));
        assert!(SignalFn::ALL.iter().all(|f| WrappedFn::from_name(f.name()).is_none()));
        assert!(SignalFn::ALL.iter().all(|f| ProcessFn::from_name(f.name()).is_none()));
        assert_eq!(SignalFn::from_name("pthread_sigmask"), Some(SignalFn::PthreadSigmask));
        // The runtime tells them from the others by `>= Sigprocmask` first.
        assert!(SignalFn::ALL.iter().all(|f| *f as u32 >= SignalFn::Sigprocmask as u32));
        assert!(ProcessFn::ALL.iter().all(|p| (*p as u32) < SignalFn::Sigprocmask as u32));
        assert!(WrappedFn::ALL.iter().all(|w| (*w as u32) < SignalFn::Sigprocmask as u32));
    }
}
