//! The engine contract: the variants manifest of the fat image, and the client for the engine's
//! HTTP surface (`/health`, `/props`, `/metrics`, `/slots`) that turns it into one [`LoadSignal`].

pub mod client;
pub mod load;
pub mod metrics;
pub mod props;
pub mod slots;
pub mod variants;
pub mod version;

pub use client::{ClientError, EngineClient, Health};
pub use load::{LoadSignal, LoadSource, SlotLoad, TokenRate};
pub use metrics::EngineMetrics;
pub use props::EngineProps;
