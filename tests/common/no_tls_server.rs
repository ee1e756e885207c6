//! A loopback "PostgreSQL server" that answers every TLS request with `N` (no TLS), as a server
//! with `ssl = off` does, then closes: what `sslmode=require` must refuse, without a server.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpListener;

/// Listens on a free loopback port until the process ends; returns the port.
pub(crate) fn no_tls_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let port = listener.local_addr().expect("its address").port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            // The SSLRequest: length 8, code 80877103.
            let mut request = [0u8; 8];
            if stream.read_exact(&mut request).is_ok() && request == [0, 0, 0, 8, 4, 210, 22, 47] {
                let _ = stream.write_all(b"N");
            }
        }
    });
    port
}
