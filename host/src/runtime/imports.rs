//! The one list of what a component may import: the idem world and WASI
//! 0.2.x's interfaces that common guest toolchains import (Rust's standard
//! library imports `wasi:io`, `wasi:cli`, `wasi:clocks` and `wasi:random`; a
//! componentize-py component also imports `wasi:filesystem` and
//! `wasi:sockets`). They are all linked, and behind them there is nothing:
//! no preopened directory, no socket, no environment (see `state.rs`).
//! Anything else — `wasi:http`, an unknown package, another major or minor
//! version — is refused at load, naming the import. Module upload validates
//! against this same list.

/// `package/interface@version` prefixes a component may import: a version
/// matches `0.2.*` for WASI (wasmtime links 0.2.0 … 0.2.x), exactly
/// `0.1.0` for idem's world.
const ALLOWED: &[(&str, &[&str], &str)] = &[
    ("idem:handler", crate::capabilities::INTERFACES, "0.1.0"),
    ("wasi:io", &["error", "poll", "streams"], "0.2."),
    ("wasi:clocks", &["monotonic-clock", "wall-clock"], "0.2."),
    ("wasi:random", &["random", "insecure", "insecure-seed"], "0.2."),
    (
        "wasi:cli",
        &[
            "environment",
            "exit",
            "stdin",
            "stdout",
            "stderr",
            "terminal-input",
            "terminal-output",
            "terminal-stdin",
            "terminal-stdout",
            "terminal-stderr",
        ],
        "0.2.",
    ),
    ("wasi:filesystem", &["types", "preopens"], "0.2."),
    (
        "wasi:sockets",
        &["network", "instance-network", "udp", "udp-create-socket", "tcp", "tcp-create-socket", "ip-name-lookup"],
        "0.2.",
    ),
];

/// Why `import` is refused, or `Ok` when the host provides it.
pub fn check(import: &str) -> Result<(), String> {
    let refused = || {
        format!(
            "imports `{import}`, which idem does not provide (allowed: the idem:handler@0.1.0 world and WASI 0.2 \
             io, clocks, random, cli, filesystem, sockets — all of them empty)"
        )
    };
    let (path, version) = import.split_once('@').ok_or_else(refused)?;
    let (package, interface) = path.split_once('/').ok_or_else(refused)?;
    let allowed = ALLOWED.iter().any(|(p, interfaces, v)| {
        *p == package
            && interfaces.contains(&interface)
            && if v.ends_with('.') { version.starts_with(v) } else { version == *v }
    });
    if allowed { Ok(()) } else { Err(refused()) }
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn the_world_and_wasi_0_2_pass_anything_else_is_named() {
        for ok in [
            "idem:handler/db@0.1.0",
            "wasi:io/streams@0.2.0",
            "wasi:cli/environment@0.2.6",
            "wasi:sockets/tcp@0.2.3",
            "wasi:filesystem/preopens@0.2.0",
        ] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
        for refused in [
            "wasi:http/outgoing-handler@0.2.0",
            "wasi:io/streams@0.3.0",
            "wasi:io/streams@1.0.0",
            "idem:handler/db@0.2.0",
            "acme:evil/backdoor@1.0.0",
            "wasi:cli/run@0.2.0",
            "env",
        ] {
            let why = check(refused).expect_err(refused);
            assert!(why.contains(&format!("`{refused}`")), "{why}");
        }
    }
}
