//! Advertises the status page on the LAN as `_http._tcp` with TXT `path=/`, so the box shows up
//! as `lucebox.local` in browsers and service browsers. Failure to advertise is a warning only.

use std::net::SocketAddr;

use mdns_sd::{ServiceDaemon, ServiceInfo};

pub const SERVICE_TYPE: &str = "_http._tcp.local.";
const INSTANCE: &str = "Lucebox";
const HOST_NAME: &str = "lucebox.local.";

/// A running advertisement; [`Advert::stop`] withdraws it.
pub struct Advert {
    daemon: ServiceDaemon,
    fullname: String,
}

/// The service record for a server listening on `addr`. A wildcard bind advertises every
/// interface address; a specific one only itself.
pub fn service_info(addr: SocketAddr) -> Result<ServiceInfo, mdns_sd::Error> {
    let properties = [("path", "/")];
    let info = if addr.ip().is_unspecified() {
        ServiceInfo::new(SERVICE_TYPE, INSTANCE, HOST_NAME, "", addr.port(), &properties[..])?
            .enable_addr_auto()
    } else {
        ServiceInfo::new(SERVICE_TYPE, INSTANCE, HOST_NAME, addr.ip(), addr.port(), &properties[..])?
    };
    Ok(info)
}

impl Advert {
    pub fn start(addr: SocketAddr) -> Option<Self> {
        let result = (|| {
            let info = service_info(addr)?;
            let fullname = info.get_fullname().to_string();
            let daemon = ServiceDaemon::new()?;
            daemon.register(info)?;
            Ok::<_, mdns_sd::Error>(Self { daemon, fullname })
        })();
        match result {
            Ok(advert) => {
                tracing::info!(service = %advert.fullname, "advertising the status page over mDNS");
                Some(advert)
            }
            Err(e) => {
                tracing::warn!("mDNS advertisement failed: {e}");
                None
            }
        }
    }

    pub fn stop(self) {
        if let Err(e) = self.daemon.unregister(&self.fullname) {
            tracing::debug!("mDNS unregister: {e}");
        }
        if let Err(e) = self.daemon.shutdown() {
            tracing::debug!("mDNS shutdown: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_names_the_http_service_and_root_path() {
        let info = service_info("192.168.1.20:8090".parse().unwrap()).unwrap();
        assert_eq!(info.get_type(), SERVICE_TYPE);
        assert_eq!(info.get_fullname(), "Lucebox._http._tcp.local.");
        assert_eq!(info.get_port(), 8090);
        assert_eq!(info.get_property_val_str("path"), Some("/"));
        assert_eq!(info.get_hostname(), HOST_NAME);
    }
}
