//! The client against the real CPU llama-server and the tiny model (CI builds both first:
//! `bash ci/build-engine.sh`, `bash ci/make-tiny-model.sh`).

mod support;

use std::time::{Duration, Instant};

use lucebox_engine::{ClientError, Health, LoadSignal};
use support::{
    chat_completion, chat_completion_with, llama_server_path, signal, wait_all_threads_stopped, LiveEngine,
};

const TEST_LIMIT: Duration = Duration::from_secs(90);

#[test]
fn missing_binary_fails_with_the_build_command() {
    let err = llama_server_path(Some("/nonexistent/llama-server".into())).unwrap_err();
    assert!(err.contains("bash ci/build-engine.sh"), "{err}");
}

#[tokio::test]
async fn health_goes_from_refused_to_loading_to_ready() {
    tokio::time::timeout(TEST_LIMIT, async {
        let engine = LiveEngine::spawn();
        let start = Instant::now();
        let mut seen: Vec<&'static str> = Vec::new();
        loop {
            let state = match engine.client.health().await {
                Err(e) if e.is_connection_refused() => "refused",
                Ok(Health::Loading) => "loading",
                Ok(Health::Ready) => "ready",
                Err(e) => panic!("unexpected health error: {e}\nlog:\n{}", engine.log()),
            };
            if seen.last() != Some(&state) {
                seen.push(state);
            }
            if state == "ready" {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "not ready; states {seen:?}\n{}",
                engine.log()
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // Refused only until the socket is bound, loading until the weights are in: never backwards.
        let expected: &[&[&str]] = &[&["refused", "loading", "ready"], &["loading", "ready"]];
        assert!(expected.contains(&seen.as_slice()), "health sequence {seen:?}");
        engine.stop().await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn props_describe_the_loaded_model() {
    tokio::time::timeout(TEST_LIMIT, async {
        let engine = LiveEngine::spawn();
        engine.wait_ready(Duration::from_secs(30)).await;
        let props = engine.client.props().await.unwrap();
        assert_eq!(props.model_path.as_deref(), Some(engine.model.to_str().unwrap()));
        assert_eq!(props.total_slots, Some(2));
        assert_eq!(props.n_ctx, Some(4096), "8192 context over 2 slots");
        assert!(props.build_info.as_deref().unwrap().contains("0c1e57098bba"));
        engine.stop().await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn load_follows_a_streaming_completion_and_counters_move() {
    tokio::time::timeout(TEST_LIMIT, async {
        let engine = LiveEngine::spawn();
        engine.wait_ready(Duration::from_secs(30)).await;

        let idle = engine.client.load().await.unwrap();
        assert!(idle.is_idle(), "{idle:?}");
        assert_eq!(idle.slots.len(), 2);
        let before = engine.client.metrics().await.unwrap();

        const MAX_TOKENS: u32 = 3500;
        let port = engine.port;
        let stream = tokio::spawn(async move { chat_completion(port, MAX_TOKENS, true).await });

        let mut busy: Option<LoadSignal> = None;
        let mut rates = Vec::new();
        while !stream.is_finished() {
            let load = engine.client.load().await.unwrap();
            rates.extend(load.tokens_per_s);
            let decoding = load.slots.iter().any(|s| s.is_processing && s.decoded_tokens > 0);
            if busy.is_none() && decoding && load.remaining_tokens() > 0 && load.active_streams() == 1 {
                busy = Some(load);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let response = stream.await.unwrap();
        assert!(response.contains(r#""finish_reason":"length""#), "stream did not run to max_tokens");

        let busy = busy.expect("no load reading showed the stream in flight");
        assert_eq!(busy.requests_processing, 1);
        assert_eq!(busy.requests_deferred, 0);
        let slot = busy.slots.iter().find(|s| s.is_processing).unwrap();
        assert!(slot.decoded_tokens > 0 && slot.decoded_tokens < u64::from(MAX_TOKENS), "{slot:?}");
        assert_eq!(slot.decoded_tokens + slot.remaining_tokens.unwrap(), u64::from(MAX_TOKENS));
        assert!(slot.prompt_tokens > 0 && slot.prompt_processed == slot.prompt_tokens, "{slot:?}");
        assert_eq!(busy.waiting_prompt_tokens(), 0);
        assert!(rates.iter().any(|r| *r > 0.0), "generation rate never positive: {rates:?}");

        // The engine releases the slot as the last chunk goes out: idle again within moments.
        let deadline = Instant::now() + Duration::from_secs(5);
        let after = loop {
            let load = engine.client.load().await.unwrap();
            if load.is_idle() {
                break load;
            }
            assert!(Instant::now() < deadline, "engine never went idle: {load:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        assert_eq!(after.remaining_tokens(), 0);

        let metrics = engine.client.metrics().await.unwrap();
        let predicted = metrics.tokens_predicted_total.unwrap() - before.tokens_predicted_total.unwrap();
        assert_eq!(predicted, f64::from(MAX_TOKENS));
        assert!(metrics.prompt_tokens_total.unwrap() > before.prompt_tokens_total.unwrap());
        engine.stop().await;
    })
    .await
    .unwrap();
}

/// `load()` names the model the engine serves, and reads the name again once the engine was gone:
/// a new profile restarts the engine on the same port with another model.
#[tokio::test]
async fn load_names_the_served_model_and_a_restarted_engine_its_new_one() {
    tokio::time::timeout(TEST_LIMIT, async {
        let first = LiveEngine::spawn();
        first.wait_ready(Duration::from_secs(30)).await;
        // One client across the restart, as the load publisher keeps.
        let client = lucebox_engine::EngineClient::new(first.client.addr());
        let name = first.model.file_name().unwrap().to_str().unwrap().to_owned();
        assert_eq!(client.load().await.unwrap().model, Some(name.clone()));

        let kept = tempfile::tempdir().unwrap();
        let another = kept.path().join("another-model-q8.gguf");
        std::fs::copy(&first.model, &another).unwrap();
        let port = first.port;
        first.stop().await;
        let err = client.load().await.unwrap_err();
        assert!(err.is_connection_refused(), "{err}");

        let second = LiveEngine::spawn_serving(&another, port);
        second.wait_ready(Duration::from_secs(30)).await;
        let load = client.load().await.unwrap();
        assert_eq!(load.model.as_deref(), Some("another-model-q8.gguf"), "still {name}?");
        second.stop().await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn hung_engine_times_out_and_exited_engine_refuses() {
    tokio::time::timeout(TEST_LIMIT, async {
        let engine = LiveEngine::spawn();
        engine.wait_ready(Duration::from_secs(30)).await;
        let pid = engine.pid();

        signal(pid, "STOP");
        let hung =
            lucebox_engine::EngineClient::with_timeout(engine.client.addr(), Duration::from_millis(300));
        wait_all_threads_stopped(pid);
        let err = hung.health().await.unwrap_err();
        assert!(matches!(err, ClientError::Timeout { .. }), "{err}");
        signal(pid, "CONT");
        engine.wait_ready(Duration::from_secs(10)).await;

        let addr = engine.client.addr();
        engine.stop().await;
        let err = lucebox_engine::EngineClient::new(addr).health().await.unwrap_err();
        assert!(err.is_connection_refused(), "{err}");
    })
    .await
    .unwrap();
}

/// llama-server counts a prompt's tokens as processed a batch (`-b`) at a time: `/slots` never
/// shows part of a batch. The thermal bench's engine (`supervisor/src/thermal/sim.rs`) shows
/// progress the same way, in whole batches of the default 2048; should a new llama-server show
/// it token by token, this fails and the bench's view of the engine needs changing with it.
#[tokio::test]
async fn a_prompt_shows_its_progress_a_batch_at_a_time() {
    tokio::time::timeout(TEST_LIMIT, async {
        let batch = 32;
        let engine = LiveEngine::spawn_with(
            &["-b", &batch.to_string(), "-ub", &batch.to_string()],
            &[("LLAMA_SERVER_SLOTS_DEBUG", "1")],
        );
        engine.wait_ready(Duration::from_secs(30)).await;
        let content = vec!["hello"; 300].join(" "); // about 1500 tokens: some 47 batches
        let port = engine.port;
        let request = tokio::spawn(async move { chat_completion_with(port, &content, 4, false).await });
        let mut shown = std::collections::BTreeSet::new();
        let mut prompt_tokens = 0;
        while !request.is_finished() {
            let load = engine.client.load().await.unwrap();
            for slot in load.slots.iter().filter(|s| s.is_processing && s.decoded_tokens == 0) {
                shown.insert(slot.prompt_processed);
                prompt_tokens = slot.prompt_tokens;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        request.await.unwrap();
        let part_way: Vec<u64> = shown.iter().copied().filter(|&p| p > 0 && p < prompt_tokens).collect();
        assert!(!part_way.is_empty(), "no reading caught the prompt part way: {shown:?} of {prompt_tokens}");
        assert!(part_way.iter().all(|p| p % batch == 0), "progress within a batch: {part_way:?}");
        engine.stop().await;
    })
    .await
    .unwrap();
}

/// `/slots` shows a prefilling request's prompt text only when the engine runs with
/// `LLAMA_SERVER_SLOTS_DEBUG=1`; with it the client sizes the prompt and the wait becomes visible.
#[tokio::test]
async fn a_prompt_being_prefilled_shows_as_waiting_tokens() {
    tokio::time::timeout(TEST_LIMIT, async {
        // Small batches make the prefill take many engine iterations, with /slots answered between.
        let engine = LiveEngine::spawn_with(&["-b", "8", "-ub", "8"], &[("LLAMA_SERVER_SLOTS_DEBUG", "1")]);
        engine.wait_ready(Duration::from_secs(30)).await;
        let words = 120; // about 600 tokens: the tiny vocabulary spells "hello" in 5 pieces
        let content = vec!["hello"; words].join(" ");
        let prompt_size = engine.client.count_tokens(&content).await.unwrap();
        assert!(prompt_size >= words as u64, "{prompt_size}");

        let port = engine.port;
        let request = tokio::spawn(async move { chat_completion_with(port, &content, 4, false).await });
        let mut prefilling = None;
        let mut props_while_prefilling = None;
        let mut decoding_prompt = None;
        while !request.is_finished() {
            let load = engine.client.load().await.unwrap();
            if let Some(slot) = load.slots.iter().find(|s| s.is_processing) {
                if slot.decoded_tokens == 0 && load.waiting_prompt_tokens() > 0 && prefilling.is_none() {
                    prefilling = Some((slot.clone(), load.waiting_prompt_tokens(), load.active_streams()));
                    // `load()` reads `/props` for the model's name: it must answer mid-prefill.
                    props_while_prefilling = Some(engine.client.props().await.map(|p| p.model_path));
                }
                if slot.decoded_tokens > 0 {
                    decoding_prompt = Some(slot.prompt_tokens);
                }
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let response = request.await.unwrap();
        assert!(response.contains(r#""finish_reason":"length""#), "{response}");

        let (slot, waiting, streams) = prefilling.expect("no reading caught the prompt being prefilled");
        // The chat template adds a handful of tokens around the user message.
        assert!((prompt_size..prompt_size + 32).contains(&slot.prompt_tokens), "{slot:?} vs {prompt_size}");
        assert_eq!(waiting, slot.prompt_tokens - slot.prompt_processed);
        assert_eq!(streams, 0, "a prefilling slot is not a decoding stream");
        let model = engine.model.to_str().map(str::to_owned);
        assert_eq!(props_while_prefilling.map(|p| p.ok().flatten()), Some(model), "/props mid-prefill");
        if let Some(decoding) = decoding_prompt {
            // Re-tokenizing the detokenized prompt may differ by a few tokens from the original.
            let tolerance = (decoding / 100).max(4);
            assert!(
                decoding.abs_diff(slot.prompt_tokens) <= tolerance,
                "sized {} vs {decoding} once decoding",
                slot.prompt_tokens
            );
        }
        engine.stop().await;
    })
    .await
    .unwrap();
}
