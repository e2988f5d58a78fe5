//! A blocking HTTP/1.1 client for the web view's tests: one request per connection, over a
//! std `TcpStream`, bounded in time.

// Each test binary uses some of these.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// An answer: its status, its headers (names in lower case) and its body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: HashMap<String, String>,
    pub body: String,
}

/// Sends `method path` with `headers` and `body` to `addr`; panics with the reason when the
/// server does not answer within 30 s.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).expect("connects");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("a timeout");
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    // `Host` is the address unless the caller gives one.
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("host"))
    {
        head.push_str(&format!("Host: {addr}\r\n"));
    }
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).expect("writes");
    stream.write_all(body.as_bytes()).expect("writes");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("reads the answer");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, rest) = text.split_once("\r\n\r\n").expect("a head and a body");
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let headers: HashMap<String, String> = lines
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_ascii_lowercase(), v.to_owned()))
        .collect();
    let body = if headers.get("transfer-encoding").map(String::as_str) == Some("chunked") {
        dechunk(rest)
    } else {
        rest.to_owned()
    };
    Answer {
        status,
        headers,
        body,
    }
}

/// `GET path`.
pub fn get(addr: SocketAddr, path: &str) -> Answer {
    request(addr, "GET", path, &[], "")
}

/// `POST path` of a form.
pub fn post(addr: SocketAddr, path: &str, form: &str, extra: &[(&str, &str)]) -> Answer {
    let mut headers = vec![("Content-Type", "application/x-www-form-urlencoded")];
    headers.extend_from_slice(extra);
    request(addr, "POST", path, &headers, form)
}

fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 || after.len() < size {
            break;
        }
        out.push_str(&after[..size]);
        rest = after[size..].trim_start_matches("\r\n");
    }
    out
}

/// `text` percent-encoded for a URL's path segment or query value.
pub fn enc(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            b => format!("%{b:02X}"),
        })
        .collect()
}
