//! The console's page, script and style sheet, embedded in the binary. They
//! are written by hand (no bundler, no framework), so what is served is
//! what is in `assets/`: nothing to build, nothing to keep in step.

use axum::http::header;
use axum::response::{IntoResponse, Response};

const INDEX: &str = include_str!("assets/index.html");
const SCRIPT: &str = include_str!("assets/console.js");
const STYLE: &str = include_str!("assets/console.css");

pub(super) async fn index() -> Response {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], INDEX).into_response()
}

pub(super) async fn script() -> Response {
    ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], SCRIPT).into_response()
}

pub(super) async fn style() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLE).into_response()
}

#[cfg(test)]
mod tests {
    /// The page loads its script and style from files only: the
    /// Content-Security-Policy allows no inline script or style, and the
    /// script never writes HTML (guest text must stay text).
    #[test]
    fn no_inline_script_and_no_html_from_strings() {
        let index = super::INDEX.to_ascii_lowercase();
        assert_eq!(index.matches("<script").count(), 1, "one script element");
        assert!(index.contains("<script src=\"/console/console.js\"></script>"));
        let inline_handler = index.split(|c: char| c.is_whitespace()).any(|word| {
            word.starts_with("on") && word.split('=').next().is_some_and(|n| n.len() > 2 && word.contains('='))
        });
        assert!(!inline_handler, "no inline event handlers");
        assert!(!index.contains("style="), "no inline style");
        for sink in ["innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"] {
            assert!(!super::SCRIPT.contains(sink), "console.js uses {sink}");
        }
    }
}
