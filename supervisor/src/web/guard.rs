//! Checks on state-changing requests: the Host and Origin headers (against DNS rebinding: a
//! hostile page whose name resolves to the box must not drive it) and the bearer token.

use std::net::IpAddr;

use hyper::header::{HeaderMap, AUTHORIZATION, HOST, ORIGIN};

use super::response::ApiError;
use super::token::ApiToken;

/// Host names (without port) a state-changing request may address. IP literals are always
/// allowed: a rebinding attack needs a name.
#[derive(Debug, Clone)]
pub struct AllowedHosts {
    names: Vec<String>,
}

impl AllowedHosts {
    pub fn new(names: impl IntoIterator<Item = String>) -> Self {
        Self { names: names.into_iter().map(|n| n.to_ascii_lowercase()).collect() }
    }

    /// `localhost`, `lucebox.local`, and this machine's host name, bare and `.local`.
    pub fn for_this_host() -> Self {
        let mut names = vec!["localhost".to_string(), "lucebox.local".to_string()];
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string());
        if let Some(host) = host.ok().filter(|h| !h.is_empty()) {
            names.push(format!("{host}.local"));
            names.push(host);
        }
        Self::new(names)
    }

    fn allows(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        host.parse::<IpAddr>().is_ok() || self.names.contains(&host)
    }
}

/// The host part of a `Host` header value (`name`, `name:port`, `[v6]:port`).
fn host_name(value: &str) -> Option<&str> {
    if let Some(rest) = value.strip_prefix('[') {
        let (inner, after) = rest.split_once(']')?;
        return (after.is_empty() || after.starts_with(':')).then_some(inner);
    }
    match value.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => Some(name),
        Some(_) => None,
        None => Some(value),
    }
}

/// Rejects a request whose Host is not ours, or whose Origin (when a browser sends one) is not
/// the same `http://host[:port]` the request addresses.
pub fn check_host_and_origin(headers: &HeaderMap, allowed: &AllowedHosts) -> Result<(), ApiError> {
    let host = headers
        .get(HOST)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| ApiError::forbidden("a Host header is required"))?;
    let name = host_name(host).ok_or_else(|| ApiError::forbidden("the Host header is malformed"))?;
    if !allowed.allows(name) {
        return Err(ApiError::forbidden(format!("host {name:?} is not served here")));
    }
    if let Some(origin) = headers.get(ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        if !origin.eq_ignore_ascii_case(&format!("http://{host}")) {
            return Err(ApiError::forbidden(format!("cross-origin request from {origin:?} refused")));
        }
    }
    Ok(())
}

/// Requires `Authorization: Bearer <token>`.
pub fn check_bearer(headers: &HeaderMap, token: &ApiToken) -> Result<(), ApiError> {
    let value = headers.get(AUTHORIZATION).ok_or_else(|| {
        ApiError::unauthorized("an Authorization: Bearer token is required (see `lucebox token`)")
    })?;
    let presented = value.to_str().ok().and_then(|v| v.strip_prefix("Bearer ")).map(str::trim);
    match presented {
        Some(candidate) if token.matches(candidate) => Ok(()),
        _ => Err(ApiError::unauthorized("the bearer token is wrong")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    fn headers(pairs: &[(hyper::header::HeaderName, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(name.clone(), HeaderValue::from_str(value).unwrap());
        }
        map
    }

    fn allowed() -> AllowedHosts {
        AllowedHosts::new(["localhost".to_string(), "lucebox.local".to_string()])
    }

    #[test]
    fn host_parsing() {
        assert_eq!(host_name("lucebox.local:8090"), Some("lucebox.local"));
        assert_eq!(host_name("[::1]:8090"), Some("::1"));
        assert_eq!(host_name("[::1]"), Some("::1"));
        assert_eq!(host_name("10.0.0.2"), Some("10.0.0.2"));
        assert_eq!(host_name("evil:x"), None);
    }

    #[test]
    fn ip_literals_and_known_names_pass() {
        for host in ["127.0.0.1:8090", "[::1]:8090", "192.168.1.20", "LUCEBOX.local:8090", "localhost."] {
            assert!(check_host_and_origin(&headers(&[(HOST, host)]), &allowed()).is_ok(), "{host}");
        }
    }

    #[test]
    fn foreign_names_and_missing_host_fail() {
        assert!(check_host_and_origin(&headers(&[(HOST, "attacker.example:8090")]), &allowed()).is_err());
        assert!(check_host_and_origin(&HeaderMap::new(), &allowed()).is_err());
    }

    #[test]
    fn origin_must_match_host() {
        let same = headers(&[(HOST, "lucebox.local:8090"), (ORIGIN, "http://lucebox.local:8090")]);
        assert!(check_host_and_origin(&same, &allowed()).is_ok());
        let other = headers(&[(HOST, "lucebox.local:8090"), (ORIGIN, "http://attacker.example")]);
        assert!(check_host_and_origin(&other, &allowed()).is_err());
        let null = headers(&[(HOST, "127.0.0.1:8090"), (ORIGIN, "null")]);
        assert!(check_host_and_origin(&null, &allowed()).is_err());
    }
}
