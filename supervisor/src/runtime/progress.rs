//! Model load progress read from the engine's own output.
//!
//! llama.cpp's default load-progress callback (`llama_model_load_from_file` without a callback of
//! the caller's) prints one `.` to stderr each time the loaded share of the weights grows by a
//! percent or more, and a newline after the 100 % dot. A line made only of dots is that bar: its
//! dot count is the percent reached (at most 99 until the newline, which means 100). Output
//! without such a line leaves the progress unknown (`None`): llama-server builds that install
//! their own callback (the pinned one does, for its router mode) print no dots.

use tokio::sync::watch;

/// Counts the dots of the progress bar in raw output chunks (which may split lines anywhere).
#[derive(Debug, Clone)]
pub struct DotProgress {
    /// Dots on the current line so far.
    dots: u32,
    /// The current line holds nothing but dots (so far).
    only_dots: bool,
    /// Highest percent reported: a bar never goes back.
    reported: Option<u8>,
}

impl Default for DotProgress {
    fn default() -> Self {
        Self { dots: 0, only_dots: true, reported: None }
    }
}

impl DotProgress {
    /// Feeds raw output; returns the new percent when it grew.
    pub fn feed(&mut self, bytes: &[u8]) -> Option<u8> {
        let before = self.reported;
        for &byte in bytes {
            match byte {
                b'.' if self.only_dots => {
                    self.dots = self.dots.saturating_add(1);
                    self.report(self.dots.min(99) as u8);
                }
                b'\n' => {
                    if self.only_dots && self.dots > 0 {
                        self.report(100);
                    }
                    self.dots = 0;
                    self.only_dots = true;
                }
                b'\r' => {}
                _ => {
                    self.only_dots = false;
                    self.dots = 0;
                }
            }
        }
        (self.reported != before).then_some(self.reported).flatten()
    }

    fn report(&mut self, percent: u8) {
        if self.reported.is_none_or(|r| percent > r) {
            self.reported = Some(percent);
        }
    }
}

/// Feeds chunks of one output stream to a [`DotProgress`] and publishes each growth on `tx`.
pub struct ProgressSink {
    parser: DotProgress,
    tx: watch::Sender<Option<u8>>,
}

impl ProgressSink {
    pub fn new(tx: watch::Sender<Option<u8>>) -> Self {
        Self { parser: DotProgress::default(), tx }
    }

    pub fn feed(&mut self, bytes: &[u8]) {
        if let Some(percent) = self.parser.feed(bytes) {
            self.tx.send_replace(Some(percent));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dots_count_up_and_the_newline_is_100() {
        let mut p = DotProgress::default();
        assert_eq!(p.feed(b"load_tensors: CPU model buffer size = 0.5 MiB\n"), None);
        assert_eq!(p.feed(b"."), Some(1));
        assert_eq!(p.feed(b".."), Some(3));
        assert_eq!(p.feed(b""), None);
        assert_eq!(p.feed(b"\nllama_context: n_ctx = 4096\n"), Some(100));
        assert_eq!(p.feed(b"....\n"), None, "never goes back or repeats");
    }

    #[test]
    fn dots_inside_text_are_not_progress() {
        let mut p = DotProgress::default();
        assert_eq!(p.feed(b"main: loading model ...\n"), None);
        assert_eq!(p.feed(b"srv  load_model: loading model '/m/tiny.gguf'\n"), None);
        assert_eq!(p.feed(b"\n"), None, "an empty line is no bar");
    }

    #[test]
    fn a_long_bar_stays_below_100_until_its_newline() {
        let mut p = DotProgress::default();
        assert_eq!(p.feed(&[b'.'; 150]), Some(99));
        assert_eq!(p.feed(b"\r\n"), Some(100));
    }

    /// The real stderr of the pinned llama-server loading the tiny model (captured with
    /// `llama-server -m lucebox-tiny.gguf -t 1 --port …` until `/health` said 200): it prints no
    /// bar, so the progress stays unknown; lines such as `initializing ...` are no bar.
    #[test]
    fn pinned_llama_server_prints_no_bar() {
        let sample = include_bytes!("../../../tests/fixtures/runtime/llama-server-load.stderr");
        assert!(sample.windows(10).any(|w| w == b"load_model"), "not a load log");
        let mut p = DotProgress::default();
        let seen: Vec<u8> = sample.iter().filter_map(|b| p.feed(std::slice::from_ref(b))).collect();
        assert!(seen.is_empty(), "{seen:?}");
    }

    /// The bar as llama.cpp's default callback writes it (src/llama.cpp: one `LLAMA_LOG_CONT(".")`
    /// per growth, then `"\n"` at 100 %), between the loader's lines, fed a byte at a time.
    #[test]
    fn default_callback_bar_reaches_100() {
        let mut sample = b"load_tensors:   CPU_Mapped model buffer size =     0.50 MiB\n".to_vec();
        sample.extend(std::iter::repeat_n(b'.', 37));
        sample.extend_from_slice(b"\nllama_context: constructing llama_context\n");
        let mut p = DotProgress::default();
        let seen: Vec<u8> = sample.iter().filter_map(|b| p.feed(std::slice::from_ref(b))).collect();
        assert_eq!(seen.last(), Some(&100), "{seen:?}");
        assert_eq!(seen.len(), 38);
        assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
    }

    #[test]
    fn sink_publishes_growth() {
        let (tx, rx) = watch::channel(None);
        let mut sink = ProgressSink::new(tx);
        sink.feed(b"..");
        assert_eq!(*rx.borrow(), Some(2));
        sink.feed(b".\n");
        assert_eq!(*rx.borrow(), Some(100));
    }
}
