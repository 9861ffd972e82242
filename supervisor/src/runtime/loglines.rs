//! Engine output into the supervisor's log, one bounded line at a time, prefixed by the engine;
//! the raw bytes of stderr also go to the load-progress parser (its bar has no newlines until
//! it is full, so it cannot wait for lines).

use tokio::io::{AsyncRead, AsyncReadExt};

use super::progress::ProgressSink;

/// Longer lines are cut: an engine printing without newlines must not grow our memory.
pub const MAX_LINE: usize = 8 * 1024;

/// Copies `reader` to the log until it closes, feeding `progress` the raw chunks.
pub async fn forward(
    engine: String,
    stream: &'static str,
    mut reader: impl AsyncRead + Unpin,
    mut progress: Option<ProgressSink>,
) {
    let mut lines = LineBuffer::default();
    let mut chunk = vec![0u8; 8 * 1024];
    loop {
        match reader.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if let Some(progress) = progress.as_mut() {
                    progress.feed(&chunk[..n]);
                }
                lines.push(&chunk[..n], |line| log_line(&engine, stream, line));
            }
        }
    }
    lines.flush(|line| log_line(&engine, stream, line));
}

pub fn log_line(engine: &str, stream: &str, line: &[u8]) {
    let text = String::from_utf8_lossy(line);
    let text = text.trim_end();
    if !text.is_empty() {
        tracing::info!(target: "engine", engine, stream, "{text}");
    }
}

/// Splits raw chunks into lines of at most [`MAX_LINE`] bytes (a longer line is emitted in
/// pieces), keeping a partial last line for the next chunk.
#[derive(Debug, Default)]
pub struct LineBuffer {
    partial: Vec<u8>,
}

impl LineBuffer {
    pub fn push(&mut self, mut bytes: &[u8], mut emit: impl FnMut(&[u8])) {
        while !bytes.is_empty() {
            let room = MAX_LINE - self.partial.len();
            match bytes.iter().position(|&b| b == b'\n') {
                Some(i) if i < room => {
                    self.partial.extend_from_slice(&bytes[..=i]);
                    bytes = &bytes[i + 1..];
                    emit(&self.partial);
                    self.partial.clear();
                }
                _ => {
                    let take = bytes.len().min(room);
                    self.partial.extend_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    if self.partial.len() == MAX_LINE {
                        emit(&self.partial);
                        self.partial.clear();
                    }
                }
            }
        }
    }

    /// Emits what is left (output that ended without a newline).
    pub fn flush(&mut self, mut emit: impl FnMut(&[u8])) {
        if !self.partial.is_empty() {
            emit(&self.partial);
            self.partial.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(chunks: &[&[u8]]) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut buffer = LineBuffer::default();
        for chunk in chunks {
            buffer.push(chunk, |l| out.push(l.to_vec()));
        }
        buffer.flush(|l| out.push(l.to_vec()));
        out
    }

    #[test]
    fn lines_are_split_joined_and_bounded() {
        let long = vec![b'x'; MAX_LINE + 10];
        let out = split(&[b"one\ntw", b"o\n", &long]);
        assert_eq!(out[0], b"one\n");
        assert_eq!(out[1], b"two\n");
        assert_eq!(out[2].len(), MAX_LINE);
        assert_eq!(out[3].len(), 10);
        assert_eq!(out.len(), 4);
    }

    #[test]
    fn a_bar_of_dots_is_one_line() {
        let out = split(&[b".", b".", b".\n", b"done\n"]);
        assert_eq!(out, [b"...\n".to_vec(), b"done\n".to_vec()]);
    }
}
