//! Signed profile updates (TUF via `tough`): check, download, verify, install into a
//! content-addressed set store, swap atomically, activate under a health gate, and commit or roll
//! back. See `README.md` beside this file for the format and the operator workflow.

pub mod activate;
pub mod archive;
pub mod bench;
pub mod cli;
pub mod http;
pub mod lock;
pub mod manifest;
pub mod models;
pub mod publish;
pub mod repo;
pub mod state;
pub mod store;
pub mod transport;
pub mod updater;

pub use activate::{ActivationError, ActivationFuture, Activator, CommandActivator};
pub use lock::{LockError, UpdateLock};
pub use updater::{
    recover, recover_when_settled, referenced_models, rollback, ApplyOptions, ApplyOutcome, OtaError,
    OtaPaths, Step, Updater,
};
