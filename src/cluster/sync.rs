//! The cluster's one poison-tolerant lock: a task that panicked while holding a lock
//! leaves data that is still consistent (every critical section here is a few plain
//! updates), so the others go on with it.

use std::sync::{Mutex, MutexGuard, PoisonError};

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
