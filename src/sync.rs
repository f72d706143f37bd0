//! Locks that a panic elsewhere does not make unusable.
//!
//! Every mutex in the crate guards data that is consistent after each single
//! operation, and no code panics while holding one; so a lock poisoned by a panic in
//! some other code (a user's callback, say) is taken as it is rather than turning one
//! panic into many.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Takes `mutex`, poisoned or not.
pub(crate) fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
