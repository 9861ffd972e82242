//! The API bearer token: 32 random bytes, hex, in `<state_dir>/api-token` with mode 0600.

use std::fs;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::fsutil::write_atomic_with_mode;

pub const TOKEN_FILE: &str = "api-token";
const TOKEN_BYTES: usize = 32;

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: not a token ({TOKEN_BYTES} bytes as hex expected); delete it to create a new one")]
    Malformed { path: PathBuf },
    #[error("reading random bytes: {0}")]
    Random(std::io::Error),
}

#[derive(Clone)]
pub struct ApiToken {
    secret: String,
    path: PathBuf,
}

impl std::fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiToken").field("path", &self.path).finish_non_exhaustive()
    }
}

impl ApiToken {
    /// Reads the token from `state_dir`, creating it (atomically, mode 0600) when absent.
    /// Returns whether it was created now.
    pub fn load_or_create(state_dir: &Path) -> Result<(Self, bool), TokenError> {
        let path = state_dir.join(TOKEN_FILE);
        match fs::read_to_string(&path) {
            Ok(text) => Ok((Self::parse(text.trim(), &path)?, false)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let secret = hex::encode(random_bytes()?);
                write_atomic_with_mode(&path, format!("{secret}\n").as_bytes(), Some(0o600))
                    .map_err(|source| TokenError::Io { path: path.clone(), source })?;
                Ok((Self { secret, path }, true))
            }
            Err(source) => Err(TokenError::Io { path, source }),
        }
    }

    fn parse(text: &str, path: &Path) -> Result<Self, TokenError> {
        let valid = text.len() == TOKEN_BYTES * 2 && text.bytes().all(|b| b.is_ascii_hexdigit());
        if !valid {
            return Err(TokenError::Malformed { path: path.to_path_buf() });
        }
        // A token readable by others is no secret: narrow it back.
        let io = |source| TokenError::Io { path: path.to_path_buf(), source };
        let mode = fs::metadata(path).map_err(io)?.permissions().mode() & 0o777;
        if mode != 0o600 {
            tracing::warn!(path = %path.display(), "API token had mode {mode:o}; setting 600");
            fs::set_permissions(path, fs::Permissions::from_mode(0o600)).map_err(io)?;
        }
        Ok(Self { secret: text.to_string(), path: path.to_path_buf() })
    }

    pub fn secret(&self) -> &str {
        &self.secret
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Compares in constant time, so response timing does not leak the token byte by byte.
    pub fn matches(&self, candidate: &str) -> bool {
        let (a, b) = (self.secret.as_bytes(), candidate.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

fn random_bytes() -> Result<[u8; TOKEN_BYTES], TokenError> {
    let mut bytes = [0u8; TOKEN_BYTES];
    fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes)).map_err(TokenError::Random)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_once_with_mode_600_then_reused() {
        let dir = tempfile::tempdir().unwrap();
        let (first, created) = ApiToken::load_or_create(dir.path()).unwrap();
        assert!(created);
        let mode = fs::metadata(first.path()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let (second, created) = ApiToken::load_or_create(dir.path()).unwrap();
        assert!(!created);
        assert_eq!(first.secret(), second.secret());
        assert_eq!(first.secret().len(), 64);
    }

    #[test]
    fn two_tokens_differ() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (a, _) = ApiToken::load_or_create(a.path()).unwrap();
        let (b, _) = ApiToken::load_or_create(b.path()).unwrap();
        assert_ne!(a.secret(), b.secret());
    }

    #[test]
    fn malformed_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(TOKEN_FILE), "short").unwrap();
        let err = ApiToken::load_or_create(dir.path()).unwrap_err();
        assert!(err.to_string().contains(TOKEN_FILE), "{err}");
    }

    #[test]
    fn wide_mode_is_narrowed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(TOKEN_FILE);
        fs::write(&path, "ab".repeat(32)).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        ApiToken::load_or_create(dir.path()).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    }

    #[test]
    fn matches_only_the_exact_token() {
        let dir = tempfile::tempdir().unwrap();
        let (token, _) = ApiToken::load_or_create(dir.path()).unwrap();
        assert!(token.matches(token.secret()));
        assert!(!token.matches(&token.secret()[1..]));
        assert!(!token.matches(&"0".repeat(64)));
        assert!(!token.matches(""));
    }
}
