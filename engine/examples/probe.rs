//! Reads a running engine once and times its endpoints (a benchmark command, not a test):
//!   cargo run --release -p lucebox-engine --example probe -- 127.0.0.1:8080 [SAMPLES]
//! Prints health, props and one load signal, then the p50/p99/max latency of `health()` and
//! `load()` over SAMPLES calls (default 200).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lucebox_engine::EngineClient;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr: SocketAddr = args.next().ok_or("usage: probe ADDR [SAMPLES]")?.parse()?;
    let samples: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(200).max(1);
    let client = EngineClient::new(addr);

    println!("health: {:?}", client.health().await?);
    let props = client.props().await?;
    println!(
        "props: model {:?}, n_ctx {:?}, slots {:?}, build {:?}",
        props.model_path, props.n_ctx, props.total_slots, props.build_info
    );
    println!("load: {:?}", client.load().await?);

    let mut health = Vec::with_capacity(samples);
    let mut load = Vec::with_capacity(samples);
    for _ in 0..samples {
        let start = Instant::now();
        client.health().await?;
        health.push(start.elapsed());
        let start = Instant::now();
        client.load().await?;
        load.push(start.elapsed());
    }
    report("health()", &mut health);
    report("load()", &mut load);
    Ok(())
}

fn report(name: &str, times: &mut [Duration]) {
    times.sort();
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    println!(
        "{name}: n={} p50={:?} p99={:?} max={:?}",
        times.len(),
        at(0.5),
        at(0.99),
        times[times.len() - 1]
    );
}
