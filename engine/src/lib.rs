//! The engine contract: the variants manifest of the fat image, and the client for the engine's
//! HTTP surface (`/health`, `/props`, `/metrics`, `/slots`) that turns it into one [`LoadSignal`].

pub mod load;
pub mod variants;
pub mod version;

pub use load::{LoadSignal, SlotLoad};
