//! Test servers' side of HTTP on the loopback: reading one request's `Authorization` header
//! and body, for the scripted endpoints the client and BFCL tests start.

use std::io::{BufRead, BufReader, Read};
use std::net::TcpStream;

/// One request as a scripted server reads it.
pub struct Request {
    /// The `Authorization` header, if sent.
    pub authorization: Option<String>,
    /// The body (empty for a GET).
    pub body: Vec<u8>,
}

/// Reads one request (headers and a `Content-Length` body), or `None` when the connection
/// closed first.
pub fn read_request(stream: &TcpStream) -> Option<Request> {
    let mut reader = BufReader::new(stream);
    let mut content_length = 0;
    let mut authorization = None;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            match name.to_ascii_lowercase().as_str() {
                "content-length" => content_length = value.trim().parse().ok()?,
                "authorization" => authorization = Some(value.trim().to_owned()),
                _ => {}
            }
        }
    }
    let mut body = vec![0; content_length];
    reader.read_exact(&mut body).ok()?;
    Some(Request {
        authorization,
        body,
    })
}
