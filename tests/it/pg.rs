//! A real PostgreSQL for the gateway's `postgres` store engine: Debian's server binaries
//! (`/usr/lib/postgresql/<newest>/bin`, or `OUTPOST_TEST_PG_BIN`), a fresh cluster in a
//! temp dir on a free loopback port, `fsync` and `synchronous_commit` on (the tests are
//! about durability), `trust` auth, superuser `outpost`.
//!
//! One cluster per test process ([`PgCluster::shared`]), started on first use and
//! stopped by an `atexit` handler, each test in its own database
//! ([`PgCluster::create_database`]). A test that stops PostgreSQL mid-run takes its own
//! ([`PgCluster::start_private`]) so it does not pull the server from under the others.
//!
//! Missing binaries skip (a `SKIPPED:` line, the way `netns` and `diskfull` do) unless
//! `OUTPOST_TEST_PG_REQUIRE=1` (CI sets it: a machine without PostgreSQL must fail, not
//! pass quietly). Any other failure to start panics with the server's log.
//!
//! initdb refuses to run as root, so under root (CI) every server-side command runs as
//! `nobody:nogroup` with supplementary groups cleared (`Command::uid`/`gid`, what
//! `setpriv --reuid --regid --clear-groups` does), in a temp dir under /tmp chowned to it.
//!
//! An interrupted run (Ctrl-C, SIGKILL) skips `atexit` and leaves its postmaster behind on
//! its own port and dir; it never blocks a later run (fresh dir, fresh port). Clean up by
//! hand with `pg_ctl stop -m immediate -D /tmp/outpost-pg-*/data`.

#![allow(dead_code)]

use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::harness::{free_port, text};

/// Where Debian installs each major version's server binaries.
const DEBIAN_PG_LIB: &str = "/usr/lib/postgresql";

static SHARED: OnceLock<Result<PgCluster, String>> = OnceLock::new();
static NEXT_DB: AtomicU32 = AtomicU32::new(0);

/// A PostgreSQL cluster of our own: data dir, log and socket in one temp dir.
pub struct PgCluster {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    /// `(uid, gid)` the server runs as when the tests run as root.
    run_as: Option<(u32, u32)>,
}

impl PgCluster {
    /// The process-wide cluster, started on first call; None (with the reason printed)
    /// when PostgreSQL is not installed.
    pub fn shared() -> Option<&'static PgCluster> {
        let started = SHARED.get_or_init(|| {
            let bin = find_bin()?;
            let pg = PgCluster::boot(bin);
            // SAFETY: registers a plain `extern "C" fn` that never unwinds.
            unsafe {
                libc::atexit(stop_shared_at_exit);
            }
            Ok(pg)
        });
        match started {
            Ok(pg) => Some(pg),
            Err(why) => {
                crate::harness::skipped("PostgreSQL suites", why);
                None
            }
        }
    }

    /// A cluster for this caller alone, stopped with `-m immediate` and deleted on drop;
    /// None (with the reason printed) when PostgreSQL is not installed.
    pub fn start_private() -> Option<PgCluster> {
        match find_bin() {
            Ok(bin) => Some(PgCluster::boot(bin)),
            Err(why) => {
                crate::harness::skipped("PostgreSQL suites", &why);
                None
            }
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `postgres://` URL of database `db` as superuser `outpost` over loopback TCP.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://outpost@127.0.0.1:{}/{db}", self.port)
    }

    /// Creates a new, empty database and returns its URL.
    pub fn create_database(&self) -> String {
        let n = NEXT_DB.fetch_add(1, Ordering::Relaxed);
        let name = format!("t{}_{n}", std::process::id());
        self.psql("postgres", &format!("CREATE DATABASE {name}"));
        self.url(&name)
    }

    /// Runs `sql` in `db` (a database name or a `postgres://` URL) and returns psql's
    /// unaligned, tuples-only output (`|` between columns); panics on any error.
    pub fn psql(&self, db: &str, sql: &str) -> String {
        self.try_psql(db, sql)
            .unwrap_or_else(|e| panic!("psql {sql:?} on {db}: {e}"))
    }

    /// [`psql`](Self::psql), with the error (e.g. the server is down) as a value.
    pub fn try_psql(&self, db: &str, sql: &str) -> Result<String, String> {
        let target = if db.contains("://") {
            db.to_string()
        } else {
            self.url(db)
        };
        let mut cmd = Command::new(self.bin.join("psql"));
        clean_env(&mut cmd)
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d"])
            .arg(&target)
            .arg("-c")
            .arg(sql)
            .env("PGCONNECT_TIMEOUT", "10");
        let o = cmd.output().expect("spawn psql");
        if o.status.success() {
            Ok(String::from_utf8_lossy(&o.stdout).trim_end().to_string())
        } else {
            Err(text(&o))
        }
    }

    /// Runs the SQL file `path` (a dump, say) in `db`; panics on any error.
    pub fn psql_file(&self, db: &str, path: &Path) {
        let mut cmd = Command::new(self.bin.join("psql"));
        clean_env(&mut cmd)
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d"])
            .arg(db)
            .arg("-f")
            .arg(path);
        let o = cmd.output().expect("spawn psql");
        assert!(o.status.success(), "psql -f {path:?}: {}", text(&o));
    }

    /// `pg_dump` of `db` (a `postgres://` URL) as plain SQL, without owners or grants.
    pub fn dump(&self, db: &str) -> String {
        let mut cmd = Command::new(self.bin.join("pg_dump"));
        clean_env(&mut cmd)
            .args(["--no-owner", "--no-privileges", "-d"])
            .arg(db);
        let o = cmd.output().expect("spawn pg_dump");
        assert!(o.status.success(), "pg_dump: {}", text(&o));
        String::from_utf8(o.stdout).unwrap()
    }

    /// `pg_ctl stop -m fast`: clients are disconnected, everything committed is on disk.
    pub fn stop_fast(&self) {
        let o = self.pg_ctl(&["stop", "-m", "fast", "-w", "-t", "60"]);
        assert!(
            o.status.success(),
            "pg_ctl stop: {}\nserver log:\n{}",
            text(&o),
            self.log_text()
        );
    }

    /// `pg_ctl stop -m immediate`: every server process quits at once, as in a crash
    /// (what was written to the WAL is recovered at the next start).
    pub fn crash(&self) {
        let o = self.pg_ctl(&["stop", "-m", "immediate", "-w", "-t", "60"]);
        assert!(
            o.status.success(),
            "pg_ctl stop -m immediate: {}\nserver log:\n{}",
            text(&o),
            self.log_text()
        );
    }

    /// Starts the server again on the same port and data dir; returns once it accepts
    /// connections over TCP.
    pub fn start(&self) {
        if let Err(why) = self.try_start() {
            panic!("{why}\nserver log:\n{}", self.log_text());
        }
    }

    /// The server's log (startup failures, crash recovery, disconnects).
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.log()).unwrap_or_default()
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    /// initdb, then start on a free port; a port taken between `free_port` and the
    /// server's bind (other tests pick ports too) is retried with another.
    fn boot(bin: PathBuf) -> PgCluster {
        let run_as = unprivileged_user();
        let dir = match run_as {
            // Under /tmp, not $TMPDIR: every parent must be traversable by `nobody`.
            Some(_) => tempfile::Builder::new()
                .prefix("outpost-pg-")
                .tempdir_in("/tmp"),
            None => tempfile::Builder::new().prefix("outpost-pg-").tempdir(),
        }
        .expect("temp dir for PostgreSQL");
        let sock = dir.path().join("sock");
        std::fs::create_dir(&sock).unwrap();
        if let Some((uid, gid)) = run_as {
            for p in [dir.path(), sock.as_path()] {
                std::os::unix::fs::chown(p, Some(uid), Some(gid)).expect("chown to nobody");
            }
        }
        let mut pg = PgCluster {
            bin,
            dir,
            port: 0,
            run_as,
        };
        let data = pg.data();
        let o = pg
            .server_cmd("initdb")
            .arg("-D")
            .arg(&data)
            .args(["-U", "outpost", "--auth=trust", "--no-locale", "-E", "UTF8"])
            .output()
            .expect("spawn initdb");
        assert!(o.status.success(), "initdb: {}", text(&o));
        let conf = data.join("postgresql.conf");
        let initdb_conf = std::fs::read_to_string(&conf).unwrap();
        for attempt in 1..=3 {
            pg.port = free_port();
            // Ours last: later settings win. Rewritten whole on each attempt.
            std::fs::write(
                &conf,
                format!(
                    "{initdb_conf}\n# outpost tests (tests/it/pg.rs)\n\
                     listen_addresses = '127.0.0.1'\n\
                     port = {}\n\
                     unix_socket_directories = '{}'\n\
                     fsync = on\n\
                     synchronous_commit = on\n\
                     full_page_writes = on\n\
                     max_connections = 300\n",
                    pg.port,
                    sock.display()
                ),
            )
            .unwrap();
            match pg.try_start() {
                Ok(()) => return pg,
                Err(_) if attempt < 3 && pg.log_text().contains("could not bind") => continue,
                Err(why) => panic!("{why}\nserver log:\n{}", pg.log_text()),
            }
        }
        unreachable!("the last attempt returns or panics")
    }

    fn try_start(&self) -> Result<(), String> {
        let log = self.log();
        let o = self.pg_ctl(&["start", "-w", "-t", "60", "-l", log.to_str().unwrap()]);
        if !o.status.success() {
            return Err(format!(
                "PostgreSQL did not start on port {}: {}",
                self.port,
                text(&o)
            ));
        }
        // pg_ctl waited for the postmaster's "ready"; make sure TCP answers too.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match self.try_psql("postgres", "SELECT 1") {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() > deadline => {
                    return Err(format!(
                        "PostgreSQL started but port {} does not answer: {e}",
                        self.port
                    ));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    fn pg_ctl(&self, args: &[&str]) -> Output {
        self.server_cmd("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(args)
            .output()
            .expect("spawn pg_ctl")
    }

    /// A server-side binary, as the unprivileged user when we are root, in our dir.
    fn server_cmd(&self, name: &str) -> Command {
        let mut cmd = Command::new(self.bin.join(name));
        // A cwd `nobody` cannot enter (the checkout under /root) makes initdb fail.
        cmd.current_dir(self.dir.path());
        if let Some((uid, gid)) = self.run_as {
            // As root, std clears the supplementary groups before setuid.
            cmd.uid(uid).gid(gid);
        }
        clean_env(&mut cmd);
        cmd
    }

    /// Immediate stop, for teardown: nothing to keep, the dir is deleted next.
    fn stop_immediate(&self) {
        let _ = self.pg_ctl(&["stop", "-m", "immediate", "-w", "-t", "30"]);
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        self.stop_immediate();
        // `dir` (a TempDir) is removed after this, with the data dir in it.
    }
}

extern "C" fn stop_shared_at_exit() {
    // Never unwind out of an atexit handler.
    let _ = std::panic::catch_unwind(|| {
        if let Some(Ok(pg)) = SHARED.get() {
            pg.stop_immediate();
            let _ = std::fs::remove_dir_all(pg.dir.path());
        }
    });
}

/// The PostgreSQL bin dir: `OUTPOST_TEST_PG_BIN`, else Debian's newest major version.
/// Err is the skip reason; with `OUTPOST_TEST_PG_REQUIRE=1` it panics instead.
fn find_bin() -> Result<PathBuf, String> {
    let need = ["initdb", "pg_ctl", "postgres", "psql"];
    let has_all = |dir: &Path| need.iter().all(|b| dir.join(b).is_file());
    let found = match std::env::var_os("OUTPOST_TEST_PG_BIN") {
        Some(dir) => {
            let dir = PathBuf::from(dir);
            // An explicit choice that does not work is a mistake, not a reason to skip.
            assert!(
                has_all(&dir),
                "OUTPOST_TEST_PG_BIN={} lacks one of {need:?}",
                dir.display()
            );
            Some(dir)
        }
        None => newest_debian_bin(&has_all),
    };
    match found {
        Some(dir) => Ok(dir),
        None => {
            let why = format!(
                "PostgreSQL binaries not found (install Debian's postgresql: \
                 {DEBIAN_PG_LIB}/<version>/bin/initdb, or set OUTPOST_TEST_PG_BIN)"
            );
            if std::env::var_os("OUTPOST_TEST_PG_REQUIRE").is_some_and(|v| v == "1") {
                panic!("OUTPOST_TEST_PG_REQUIRE=1: {why}");
            }
            Err(why)
        }
    }
}

/// `/usr/lib/postgresql/<v>/bin` with the highest `<v>` (compared numerically: 9.6 < 15).
fn newest_debian_bin(usable: &dyn Fn(&Path) -> bool) -> Option<PathBuf> {
    let version = |name: &str| -> Option<Vec<u32>> {
        name.split('.').map(|part| part.parse().ok()).collect()
    };
    std::fs::read_dir(DEBIAN_PG_LIB)
        .ok()?
        .filter_map(|e| {
            let e = e.ok()?;
            let v = version(e.file_name().to_str()?)?;
            let bin = e.path().join("bin");
            usable(&bin).then_some((v, bin))
        })
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, bin)| bin)
}

/// `Some((nobody, nogroup))` when running as root, None otherwise.
fn unprivileged_user() -> Option<(u32, u32)> {
    // Looked up once: getpwnam/getgrnam share static buffers between threads.
    static RUN_AS: OnceLock<Option<(u32, u32)>> = OnceLock::new();
    *RUN_AS.get_or_init(lookup_nobody)
}

fn lookup_nobody() -> Option<(u32, u32)> {
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    // SAFETY: NUL-terminated names; the records are read at once, and only this
    // once-only lookup calls getpw*/getgr* in the test process.
    unsafe {
        let pw = libc::getpwnam(c"nobody".as_ptr());
        assert!(
            !pw.is_null(),
            "running as root needs user `nobody` for PostgreSQL"
        );
        let gr = libc::getgrnam(c"nogroup".as_ptr());
        let gid = if gr.is_null() {
            (*pw).pw_gid
        } else {
            (*gr).gr_gid
        };
        Some(((*pw).pw_uid, gid))
    }
}

/// Drops `PG*` variables (PGHOST, PGDATA, PGUSER…) that would redirect the binaries.
fn clean_env(cmd: &mut Command) -> &mut Command {
    for (k, _) in std::env::vars_os() {
        if k.to_str().is_some_and(|k| k.starts_with("PG")) {
            cmd.env_remove(k);
        }
    }
    cmd.env("LC_ALL", "C")
}

/// The config drop-in that points a gateway's store at `url`.
pub fn store_toml(url: &str) -> String {
    format!("[store]\nengine = \"postgres\"\npostgres_url = \"{url}\"\n")
}

#[test]
fn shared_cluster_gives_each_caller_an_empty_database_of_its_own() {
    let Some(pg) = PgCluster::shared() else {
        return;
    };
    let a = pg.create_database();
    let b = pg.create_database();
    assert_ne!(a, b);
    assert!(a.starts_with(&format!("postgres://outpost@127.0.0.1:{}/", pg.port())));
    assert_eq!(pg.psql(&a, "SELECT 1"), "1");
    pg.psql(&a, "CREATE TABLE t (x int); INSERT INTO t VALUES (7)");
    assert_eq!(pg.psql(&a, "SELECT x FROM t"), "7");
    assert_eq!(
        pg.psql(
            &b,
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
        ),
        "0",
        "a new database must be empty"
    );
    // Durability is what the gateway's tests check: nothing may be relaxed.
    let settings = pg.psql(
        &a,
        "SELECT current_setting('fsync'), current_setting('synchronous_commit'), \
         current_setting('full_page_writes'), current_setting('max_connections'), current_user",
    );
    assert_eq!(settings, "on|on|on|300|outpost");
    assert!(
        pg.try_psql(&a, "SELECT nonsense FROM nowhere").is_err(),
        "an SQL error must be an error"
    );
}

#[test]
fn shared_cluster_does_not_run_as_root() {
    let Some(pg) = PgCluster::shared() else {
        return;
    };
    // The postmaster (a backend's pid is gone as soon as psql disconnects).
    let pid: u32 = pg
        .psql(
            "postgres",
            "SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'",
        )
        .parse()
        .unwrap();
    use std::os::unix::fs::MetadataExt;
    let uid = std::fs::metadata(format!("/proc/{pid}")).unwrap().uid();
    match unprivileged_user() {
        Some((nobody, _)) => {
            assert_eq!(uid, nobody, "server must run as nobody under root");
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
            let groups = status.lines().find(|l| l.starts_with("Groups:")).unwrap();
            assert_eq!(groups.trim(), "Groups:", "root's supplementary groups kept");
        }
        // SAFETY: geteuid(2) cannot fail.
        None => assert_eq!(uid, unsafe { libc::geteuid() }),
    }
}

#[test]
fn private_cluster_keeps_committed_rows_across_a_fast_stop_and_is_gone_after_drop() {
    let Some(pg) = PgCluster::start_private() else {
        return;
    };
    let db = pg.create_database();
    pg.psql(&db, "CREATE TABLE t (x int); INSERT INTO t VALUES (1), (2)");
    pg.stop_fast();
    let down = pg.try_psql(&db, "SELECT 1");
    assert!(down.is_err(), "psql answered while stopped: {down:?}");
    pg.start();
    assert_eq!(pg.psql(&db, "SELECT sum(x) FROM t"), "3");
    // Same port, still answering on it after the restart.
    assert!(pg.url("x").contains(&format!(":{}/", pg.port())));

    let (port, dir) = (pg.port(), pg.dir.path().to_path_buf());
    drop(pg);
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "postmaster still listening on {port} after drop"
    );
    assert!(!dir.exists(), "{} left behind", dir.display());
}
