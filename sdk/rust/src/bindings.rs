//! The one place that runs `wit_bindgen::generate!`. Handler authors never
//! name anything in here; the rest of the SDK wraps it.

wit_bindgen::generate!({
    world: "handler",
    path: "../../wit",
    // The export macro is used from the handler's crate, through
    // `idem_guest::handler!`, so it must name the bindings by absolute path.
    default_bindings_module: "idem_guest::bindings",
    pub_export_macro: true,
    export_macro_name: "export_handler",
    generate_all,
});
