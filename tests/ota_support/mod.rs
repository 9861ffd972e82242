//! Shared helpers of the OTA integration tests: a real HTTP or HTTPS file server on 127.0.0.1
//! with fault modes, a test CA (rcgen) for HTTPS, profile-set fixtures published as real signed
//! repositories, and disk snapshots.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::num::NonZeroU64;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use lucebox::ota::publish::{self, Expiry, PublishOptions, Published};
use sha2::Digest;
use tokio_util::sync::CancellationToken;

pub fn keys_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/ota/keys")
}

pub fn key(name: &str) -> PathBuf {
    keys_dir().join(format!("{name}.pem"))
}

pub fn sha256_hex(data: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(data))
}

/// What the server does differently for paths ending in a given suffix.
#[derive(Default)]
pub struct Faults {
    /// Send only this many bytes of the body, then drop the connection (once per path).
    pub cut_once: HashMap<String, u64>,
    /// Stream zeros forever.
    pub endless: HashSet<String>,
}

/// A CA made for one test and a server certificate it issued for `localhost` and 127.0.0.1.
pub struct TestPki {
    /// The CA certificate, PEM: what a box names in `ota.ca_file`.
    pub ca_pem: String,
    pub server: Arc<tokio_rustls::rustls::ServerConfig>,
}

impl TestPki {
    pub fn new(name: &str) -> Self {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
            KeyUsagePurpose,
        };
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(DnType::CommonName, format!("{name} test CA"));
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca_params, ca_key);
        let leaf_key = KeyPair::generate().unwrap();
        let mut leaf_params = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
        leaf_params.distinguished_name.push(DnType::CommonName, "localhost");
        leaf_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let leaf = leaf_params.signed_by(&leaf_key, &issuer).unwrap();
        let key = tokio_rustls::rustls::pki_types::PrivatePkcs8KeyDer::from(leaf_key.serialize_der()).into();
        let provider = Arc::new(tokio_rustls::rustls::crypto::aws_lc_rs::default_provider());
        let server = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![leaf.der().clone(), ca_cert.der().clone()], key)
            .unwrap();
        Self { ca_pem: ca_cert.pem(), server: Arc::new(server) }
    }

    /// Writes the CA certificate to `path` and returns it.
    pub fn write_ca(&self, path: &Path) -> PathBuf {
        std::fs::write(path, &self.ca_pem).unwrap();
        path.to_path_buf()
    }
}

pub struct FileServer {
    pub addr: SocketAddr,
    scheme: &'static str,
    pub root: PathBuf,
    pub faults: Arc<Mutex<Faults>>,
    /// "PATH RANGE" of every request, in order.
    pub log: Arc<Mutex<Vec<String>>>,
    cancel: CancellationToken,
}

impl Drop for FileServer {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

impl FileServer {
    pub async fn start(root: &Path) -> Self {
        Self::start_with(root, None).await
    }

    /// The same server behind TLS with `pki`'s server certificate.
    pub async fn start_tls(root: &Path, pki: &TestPki) -> Self {
        Self::start_with(root, Some(tokio_rustls::TlsAcceptor::from(pki.server.clone()))).await
    }

    async fn start_with(root: &Path, tls: Option<tokio_rustls::TlsAcceptor>) -> Self {
        let scheme = if tls.is_some() { "https" } else { "http" };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let faults = Arc::new(Mutex::new(Faults::default()));
        let log = Arc::new(Mutex::new(Vec::new()));
        let cancel = CancellationToken::new();
        let (root_c, faults_c, log_c, cancel_c) =
            (root.to_path_buf(), faults.clone(), log.clone(), cancel.clone());
        tokio::spawn(async move {
            loop {
                let stream = tokio::select! {
                    _ = cancel_c.cancelled() => return,
                    accepted = listener.accept() => match accepted { Ok((s, _)) => s, Err(_) => continue },
                };
                let (root, faults, log) = (root_c.clone(), faults_c.clone(), log_c.clone());
                let tls = tls.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let (root, faults, log) = (root.clone(), faults.clone(), log.clone());
                        async move { Ok::<_, Infallible>(serve(&root, &faults, &log, req)) }
                    });
                    let http = hyper::server::conn::http1::Builder::new();
                    match tls {
                        None => {
                            let _ = http.serve_connection(TokioIo::new(stream), service).await;
                        }
                        // A client that refuses the certificate ends the handshake: nothing to serve.
                        Some(acceptor) => {
                            if let Ok(stream) = acceptor.accept(stream).await {
                                let _ = http.serve_connection(TokioIo::new(stream), service).await;
                            }
                        }
                    }
                });
            }
        });
        Self { addr, scheme, root: root.to_path_buf(), faults, log, cancel }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}://{}/{}", self.scheme, self.addr, path.trim_start_matches('/'))
    }
}

type Body = BoxBody<Bytes, std::io::Error>;

fn full(status: StatusCode, data: Vec<u8>) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(data)).map_err(|never| match never {}).boxed());
    *r.status_mut() = status;
    r
}

fn serve(
    root: &Path,
    faults: &Mutex<Faults>,
    log: &Mutex<Vec<String>>,
    req: Request<hyper::body::Incoming>,
) -> Response<Body> {
    let path = req.uri().path().trim_start_matches('/').to_string();
    let range = req.headers().get(hyper::header::RANGE).and_then(|v| v.to_str().ok()).map(str::to_string);
    log.lock().unwrap().push(format!("{path} {}", range.clone().unwrap_or_default()));
    let mut faults = faults.lock().unwrap();
    if faults.endless.iter().any(|s| path.ends_with(s.as_str())) {
        let zeros = futures_util::stream::repeat_with(|| {
            Ok::<_, std::io::Error>(Frame::data(Bytes::from(vec![0u8; 65536])))
        });
        return Response::new(BodyExt::boxed(StreamBody::new(zeros)));
    }
    if path.contains("..") {
        return full(StatusCode::FORBIDDEN, Vec::new());
    }
    let Ok(data) = std::fs::read(root.join(&path)) else {
        return full(StatusCode::NOT_FOUND, Vec::new());
    };
    let total = data.len();
    let start = range
        .as_deref()
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.strip_suffix('-'))
        .and_then(|n| n.parse::<usize>().ok())
        .filter(|&n| n <= total);
    let body = data[start.unwrap_or(0)..].to_vec();
    let cut_key = faults.cut_once.keys().find(|s| path.ends_with(s.as_str())).cloned();
    let mut response = if let Some(key) = cut_key {
        let keep = faults.cut_once.remove(&key).unwrap_or(0) as usize;
        let head = Bytes::from(body[..keep.min(body.len())].to_vec());
        let frames = futures_util::stream::iter(vec![
            Ok(Frame::data(head)),
            Err(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "cut by test server")),
        ]);
        let mut r = Response::new(BodyExt::boxed(StreamBody::new(frames)));
        r.headers_mut().insert(hyper::header::CONTENT_LENGTH, body.len().into());
        r
    } else {
        full(StatusCode::OK, body)
    };
    if let Some(start) = start {
        *response.status_mut() = StatusCode::PARTIAL_CONTENT;
        response.headers_mut().insert(
            hyper::header::CONTENT_RANGE,
            format!("bytes {start}-{}/{total}", total.saturating_sub(1)).parse().unwrap(),
        );
    }
    response
}

/// A profile-set directory: manifest (with `models`), one profile, variants, thermal priors.
pub fn make_set(dir: &Path, version: u64, profile_text: &str, models: &[lucebox::ota::manifest::ModelFile]) {
    let manifest = lucebox::ota::manifest::Manifest { version, models: models.to_vec() };
    std::fs::create_dir_all(dir.join("profiles")).unwrap();
    std::fs::create_dir_all(dir.join("thermal")).unwrap();
    std::fs::write(dir.join("manifest.toml"), toml::to_string(&manifest).unwrap()).unwrap();
    std::fs::write(dir.join("profiles/tiny.toml"), profile_text).unwrap();
    std::fs::write(dir.join("variants.toml"), "# pins\n").unwrap();
    std::fs::write(dir.join("thermal/priors.toml"), "# priors\n").unwrap();
}

pub struct PublishSpec<'a> {
    pub keys: &'a [&'a str],
    pub threshold: u64,
    pub expiry: Expiry,
    /// Rotate the root to these keys (signed by `keys` and these) before signing the release.
    pub rotate_to: &'a [&'a str],
}

impl Default for PublishSpec<'_> {
    fn default() -> Self {
        Self { keys: &["a"], threshold: 1, expiry: Expiry::days_from_now(7), rotate_to: &[] }
    }
}

/// Publishes `set_dir` into `repo_dir` (creating `repo_dir/root.json` on first use).
pub async fn publish(set_dir: &Path, repo_dir: &Path, spec: &PublishSpec<'_>) -> Published {
    publish::publish(&publish_options(set_dir, repo_dir, spec)).await.unwrap()
}

pub fn publish_options(set_dir: &Path, repo_dir: &Path, spec: &PublishSpec<'_>) -> PublishOptions {
    PublishOptions {
        set_dir: set_dir.to_path_buf(),
        repo_dir: repo_dir.to_path_buf(),
        root: repo_dir.join("root.json"),
        keys: spec.keys.iter().map(|k| key(k)).collect(),
        threshold: NonZeroU64::new(spec.threshold).unwrap(),
        rotate_to: spec.rotate_to.iter().map(|k| key(k)).collect(),
        expiry: spec.expiry,
        metadata_version: None,
    }
}

/// Every file and link below `dir` with a hash of its contents, minus the lock file's holder
/// record and tough's datastore: TUF itself advances the datastore to any newer metadata that
/// verified before a later check failed (and re-stores the root and the latest known time on
/// every load); tests check the role they attacked there separately.
pub fn snapshot(dir: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&current) else { continue };
        for entry in entries.map(Result::unwrap) {
            let path = entry.path();
            let rel = path.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
            if rel.ends_with("update.lock") || rel.starts_with("ota/datastore") {
                continue;
            }
            let kind = entry.file_type().unwrap();
            if kind.is_symlink() {
                out.insert(rel, format!("-> {}", std::fs::read_link(&path).unwrap().display()));
            } else if kind.is_dir() {
                out.insert(rel.clone(), "dir".into());
                pending.push(path);
            } else {
                out.insert(rel, sha256_hex(&std::fs::read(&path).unwrap()));
            }
        }
    }
    out
}

pub fn copy_dir(from: &Path, to: &Path) {
    let status = std::process::Command::new("cp").arg("-a").arg(from).arg(to).status().unwrap();
    assert!(status.success());
}

/// An activation that always succeeds: tests whose subject is download, verification and install.
pub struct Healthy;

impl lucebox::ota::Activator for Healthy {
    fn activate<'a>(&'a self, _set_dir: &'a Path) -> lucebox::ota::ActivationFuture<'a> {
        Box::pin(async { Ok(()) })
    }
}
