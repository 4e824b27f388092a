//! The one integration test binary: real `outpost` processes on temp dirs and port 0.

mod audit;
mod demo;
mod gateway;
mod gateway_audit;
mod gateway_tls;
mod harness;
mod malformed;
mod node;
mod store_cli;
mod systemd;
