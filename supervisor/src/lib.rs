//! Lucebox supervisor: detects the hardware, plans which engine build and model profile run on
//! each device, keeps the engines running, controls the fans, serves the status page and applies
//! signed profile updates.
//!
//! Data flows one way: `hardware` → `plan` → `runtime`; the runtime's load signal → `thermal`.
//! Every part publishes what it knows to the one [`status::StatusModel`] that `web` reads.

pub mod appliance;
pub mod blocking;
pub mod config;
pub mod control;
pub mod exec;
pub mod fsutil;
pub mod hardware;
pub mod hooks;
pub mod ota;
pub mod plan;
pub mod runtime;
pub mod status;
pub mod supervise;
pub mod thermal;
pub mod version;
pub mod watchdog;
pub mod web;
