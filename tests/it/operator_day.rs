//! The operator's day (issue 38), the CLI and node side: what an operator is told about
//! a retired node and a rejected device is true and leads somewhere, and an enrollment
//! token can be written where only its owner reads it.

use std::os::unix::fs::PermissionsExt;

use crate::harness::{text, Home};

/// `enroll-token create --out FILE` writes the token readable by its owner only, even
/// over a world-readable file, and prints nothing on stdout.
#[test]
fn an_enrollment_token_written_with_out_is_0600() {
    let gw = Home::init("gateway", "gateway:main", "");
    let file = gw.dir.path().join("enroll.token");
    std::fs::write(&file, "old").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let f = file.to_str().unwrap();
    let o = gw.cli(&["enroll-token", "create", "--max-uses", "3", "--out", f]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(o.stdout.is_empty(), "{}", text(&o));
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let token = std::fs::read_to_string(&file).unwrap();
    assert!(token.trim().len() > 40 && !token.contains("old"), "{token}");
    // The token in the file is one the gateway recorded.
    let o = gw.cli(&["enroll-token", "list", "--json"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 1);
}
