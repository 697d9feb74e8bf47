//! Sessions: how long they last, which end, and whose CSRF token a change
//! must carry.

use reqwest::StatusCode;
use serde_json::json;

use super::console::Console;
use super::{Env, Host, READ_TOKEN, TOKEN};

/// What the console answers a cookie whose session is gone.
const ENDED: &str = "log in first: no session, or it ended";

/// README: a login's session is "an `HttpOnly; SameSite=Strict` cookie,
/// good for 8 hours"; "Sessions do not survive a restart". The cookie
/// says `Max-Age=28800`; the session answers until it ends, and after a
/// logout or a restart of the host its cookie is answered 401 (the page
/// shows its login on a 401: "Your session ended (…). Log in again…") while a
/// new login is let in. (The end of the 8 hours: `expiry.rs`.)
#[tokio::test(flavor = "multi_thread")]
async fn a_session_lasts_eight_hours_and_one_ended_by_logout_or_restart_is_refused() {
    let env = Env::new().await;
    let config = env.config("");
    let host = Host::start(&config).await;
    let console = Console::of(&host);
    let operator = console.session(TOKEN).await;
    let attributes: Vec<String> =
        operator.set_cookie.split(';').skip(1).map(|a| a.trim().to_ascii_lowercase()).collect();
    for wanted in ["httponly", "samesite=strict", "path=/console", "max-age=28800"] {
        assert!(attributes.iter().any(|a| a == wanted), "{wanted} in {}", operator.set_cookie);
    }
    let live = console.get(&operator, "/console/api/session").await;
    assert_eq!(live.status, StatusCode::OK, "{:?}", live.body);
    assert_eq!(live.body, json!({ "scope": "operate", "csrf": operator.csrf, "actor": "$IDEM_ADMIN_TOKEN" }));

    // Logged out: the cookie names nothing any more.
    let reader = console.session(READ_TOKEN).await;
    let out = console.post(&reader, &reader.csrf, "/console/api/logout", &json!({})).await;
    assert_eq!(out.status, StatusCode::OK, "{:?}", out.body);
    for path in ["/console/api/session", "/console/api/overview"] {
        let gone = console.get(&reader, path).await;
        assert_eq!((gone.status, gone.error()), (StatusCode::UNAUTHORIZED, ENDED), "{path} after the logout");
    }
    assert_eq!(console.get(&operator, "/console/api/session").await.status, StatusCode::OK, "the other session");

    // A restart ends every session.
    host.stop().await;
    let host = Host::start(&config).await;
    let console = Console::of(&host);
    for path in ["/console/api/session", "/console/api/handlers/billing/dead-letters"] {
        let gone = console.get(&operator, path).await;
        assert_eq!((gone.status, gone.error()), (StatusCode::UNAUTHORIZED, ENDED), "{path} after a restart");
    }
    let again = console.session(TOKEN).await;
    assert_ne!(again.cookie, operator.cookie);
    assert_eq!(console.get(&again, "/console/api/session").await.status, StatusCode::OK, "a new login");
    host.stop().await;
    env.finish().await;
}

/// README: "Every change carries the session's CSRF token in
/// `X-CSRF-Token`". A token is a session's own: another live session's
/// valid token, sent with this session's cookie, is refused (403) on an
/// activation and on a logout, which then change nothing (the session is
/// still live); the session's own token is taken. A host that accepted
/// any live session's token would let a page that learned one (its own
/// login's, say) make changes with every other operator's cookie.
#[tokio::test(flavor = "multi_thread")]
async fn a_change_carrying_another_live_sessions_csrf_token_is_refused() {
    let env = Env::new().await;
    let host = Host::start(&env.config("")).await;
    let console = Console::of(&host);
    let (mine, theirs) = (console.session(TOKEN).await, console.session(TOKEN).await);
    assert_ne!(mine.csrf, theirs.csrf);
    let version =
        env.db.count("SELECT version::bigint FROM idem.handler_module WHERE handler = 'billing' AND active").await;
    let activate = format!("/console/api/handlers/billing/activate?version={version}");
    let refusal = "a change needs this session's CSRF token in X-CSRF-Token";

    let crossed = console.post(&mine, &theirs.csrf, &activate, &json!({})).await;
    assert_eq!((crossed.status, crossed.error()), (StatusCode::FORBIDDEN, refusal), "an activation");
    let crossed = console.post(&mine, &theirs.csrf, "/console/api/logout", &json!({})).await;
    assert_eq!((crossed.status, crossed.error()), (StatusCode::FORBIDDEN, refusal), "a logout");
    for session in [&mine, &theirs] {
        assert_eq!(console.get(session, "/console/api/session").await.status, StatusCode::OK, "still logged in");
    }

    let own = console.post(&mine, &mine.csrf, &activate, &json!({})).await;
    assert_eq!(own.status, StatusCode::OK, "with its own token: {:?}", own.body);
    let own = console.post(&mine, &mine.csrf, "/console/api/logout", &json!({})).await;
    assert_eq!(own.status, StatusCode::OK, "{:?}", own.body);
    assert_eq!(console.get(&mine, "/console/api/session").await.status, StatusCode::UNAUTHORIZED, "logged out");
    assert_eq!(console.get(&theirs, "/console/api/session").await.status, StatusCode::OK, "the other still live");
    host.stop().await;
    env.finish().await;
}
