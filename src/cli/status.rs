//! `outpost status`: asks the running daemon (its address from `api.addr`, else the
//! configured one).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::Value;

use super::common::load_config;
use super::{ConfigArg, Exit};

pub fn status(arg: &ConfigArg, json: bool) -> anyhow::Result<()> {
    let cfg = load_config(arg)?;
    let addr = crate::daemon::listen::read_addr_file(&cfg.data_dir).unwrap_or(cfg.listen);
    let body = http_get(addr, "/v1/status").map_err(|e| {
        Exit::failed(format!(
            "the daemon does not answer on {addr} ({e}); is `outpost run` active?"
        ))
    })?;
    let v: Value = serde_json::from_str(&body)?;
    if json {
        println!("{}", serde_json::to_string(&v)?);
        return Ok(());
    }
    println!(
        "{} ({}) v{} up {}s",
        v["node_id"].as_str().unwrap_or("?"),
        v["role"].as_str().unwrap_or("?"),
        v["version"].as_str().unwrap_or("?"),
        v["uptime_s"]
    );
    println!("upstream: {}", v["upstream"]);
    println!(
        "audit: {} entries, {} synced",
        v["audit"]["size"], v["audit"]["synced_size"]
    );
    match v["queues"].as_array() {
        Some(q) if !q.is_empty() => {
            println!(
                "{:<10} {:<32} {:>8} {:>12}",
                "QUEUE", "PEER", "DEPTH", "OLDEST_S"
            );
            for e in q {
                println!(
                    "{:<10} {:<32} {:>8} {:>12}",
                    e["queue"].as_str().unwrap_or(""),
                    e["peer"].as_str().unwrap_or(""),
                    e["depth"],
                    e["oldest_age_s"]
                );
            }
        }
        _ => println!("queues: empty"),
    }
    Ok(())
}

/// A tiny loopback HTTP/1.1 GET, enough for status without an HTTP client runtime.
fn http_get(addr: std::net::SocketAddr, path: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(3))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAccept: application/json\r\n\r\n"
    )?;
    let mut buf = String::new();
    s.read_to_string(&mut buf)?;
    let (head, body) = buf
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("malformed HTTP response"))?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(std::io::Error::other(
            head.lines().next().unwrap_or("").to_string(),
        ));
    }
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return Ok(dechunk(body));
    }
    Ok(body.to_string())
}

fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size_line, after)) = rest.split_once("\r\n") {
        let size = usize::from_str_radix(size_line.trim(), 16).unwrap_or(0);
        if size == 0 || after.len() < size {
            break;
        }
        out.push_str(&after[..size]);
        rest = after[size..].trim_start_matches("\r\n");
    }
    out
}
