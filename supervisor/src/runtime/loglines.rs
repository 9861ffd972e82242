//! Engine output into the supervisor's log, one bounded line at a time, prefixed by the engine.

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

/// Longer lines are cut: an engine printing without newlines must not grow our memory.
pub const MAX_LINE: usize = 8 * 1024;

/// Copies `reader` to the log until it closes.
pub async fn forward(engine: String, stream: &'static str, reader: impl AsyncRead + Unpin) {
    let mut reader = BufReader::new(reader);
    let mut line = Vec::with_capacity(256);
    loop {
        line.clear();
        match read_bounded_line(&mut reader, &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => log_line(&engine, stream, &line),
        }
    }
}

pub fn log_line(engine: &str, stream: &str, line: &[u8]) {
    let text = String::from_utf8_lossy(line);
    let text = text.trim_end();
    if !text.is_empty() {
        tracing::info!(target: "engine", engine, stream, "{text}");
    }
}

/// Reads up to a newline or [`MAX_LINE`] bytes; returns bytes consumed (0 at end of stream).
async fn read_bounded_line<R: AsyncBufReadExt + Unpin>(
    reader: &mut R,
    line: &mut Vec<u8>,
) -> std::io::Result<usize> {
    let mut consumed = 0;
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok(consumed);
        }
        let room = MAX_LINE - line.len();
        let (take, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) if i < room => (i + 1, true),
            _ => (buf.len().min(room), buf.len() >= room),
        };
        line.extend_from_slice(&buf[..take]);
        reader.consume(take);
        consumed += take;
        if done {
            return Ok(consumed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_are_split_and_bounded() {
        let long = vec![b'x'; MAX_LINE + 10];
        let mut input = b"one\ntwo\n".to_vec();
        input.extend_from_slice(&long);
        let mut reader = BufReader::new(&input[..]);
        let mut line = Vec::new();
        read_bounded_line(&mut reader, &mut line).await.unwrap();
        assert_eq!(line, b"one\n");
        line.clear();
        read_bounded_line(&mut reader, &mut line).await.unwrap();
        assert_eq!(line, b"two\n");
        line.clear();
        read_bounded_line(&mut reader, &mut line).await.unwrap();
        assert_eq!(line.len(), MAX_LINE);
        line.clear();
        assert_eq!(read_bounded_line(&mut reader, &mut line).await.unwrap(), 10);
        line.clear();
        assert_eq!(read_bounded_line(&mut reader, &mut line).await.unwrap(), 0);
    }
}
