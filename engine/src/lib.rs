//! The engine contract: the variants manifest of the fat image, and the client for the engine's
//! HTTP surface (`/health`, `/props`, `/metrics`, `/slots`) that turns it into one [`LoadSignal`].

pub mod load;

pub use load::{LoadSignal, SlotLoad};
