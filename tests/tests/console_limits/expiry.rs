//! A session past its 8 hours, on a host whose clocks are moved forward
//! by libfaketime (Debian's `libfaketime`), `LD_PRELOAD`ed into `idem run`.

use std::path::PathBuf;

use reqwest::StatusCode;

use super::console::Console;
use super::{Env, Host, TOKEN};

/// libfaketime's library, wherever Debian put it for this architecture.
fn libfaketime() -> PathBuf {
    let found = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|dir| dir.path().join("faketime/libfaketime.so.1"))
        .chain([PathBuf::from("/usr/lib/faketime/libfaketime.so.1")])
        .find(|path| path.exists());
    found.unwrap_or_else(|| {
        panic!("no libfaketime.so.1 under /usr/lib: install Debian's libfaketime (apt-get install libfaketime)")
    })
}

/// README: a login's session is "an `HttpOnly; SameSite=Strict` cookie,
/// good for 8 hours". The host runs under libfaketime, its clocks (the
/// monotonic one a session's age is measured by included) offset by what
/// a file says, read at every clock call. Moved 7 h 59 min on, the session
/// still answers; moved 8 h 1 min on, its cookie is answered 401 ("log in
/// first": the page then shows its login) while a new login is let in.
/// A host whose sessions never ended would answer 200 to the last.
#[tokio::test(flavor = "multi_thread")]
async fn a_session_is_refused_once_its_eight_hours_are_over_and_a_new_login_is_let_in() {
    let env = Env::new().await;
    let config = env.config("");
    let offset = std::env::temp_dir().join(idem_tests::unique_name("faketime_offset"));
    let at = |seconds: u32| std::fs::write(&offset, format!("+{seconds}\n")).expect("the clock's offset");
    at(0);
    let library = libfaketime();
    let faked = [
        ("LD_PRELOAD", library.to_str().expect("path")),
        ("FAKETIME_TIMESTAMP_FILE", offset.to_str().expect("path")),
        ("FAKETIME_NO_CACHE", "1"),
    ];
    let host = Host::start_with(&config, &faked).await;
    let console = Console::of(&host);
    let operator = console.session(TOKEN).await;
    assert_eq!(console.get(&operator, "/console/api/session").await.status, StatusCode::OK, "just logged in");

    at(8 * 3600 - 60);
    let before = console.get(&operator, "/console/api/session").await;
    assert_eq!(before.status, StatusCode::OK, "7 h 59 min after the login: {:?}", before.body);
    at(8 * 3600 + 60);
    for path in ["/console/api/session", "/console/api/overview"] {
        let after = console.get(&operator, path).await;
        assert_eq!(
            (after.status, after.error()),
            (StatusCode::UNAUTHORIZED, "log in first: no session, or it ended"),
            "{path} 8 h 1 min after the login"
        );
    }
    let again = console.session(TOKEN).await;
    assert_eq!(console.get(&again, "/console/api/session").await.status, StatusCode::OK, "a new login");
    // Its consumer's timers jumped 8 hours too: it is killed, not stopped.
    drop(host);
    let _ = std::fs::remove_file(&offset);
    env.finish().await;
}
