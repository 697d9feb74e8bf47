#!/usr/bin/env python3
"""JSON schemas for kubeconform, from the Kubernetes API's own OpenAPI
document and CRDs, for exactly the kinds some manifests use.

    kube-schemas.py SWAGGER_JSON CRD_DIR OUT_DIR MANIFEST...

kubeconform looks a kind up as OUT_DIR/<kind><suffix>.json, where the
suffix is -<group's first label>-<version> (-<version> for the core
group): configmap-v1.json, statefulset-apps-v1.json,
scaledobject-keda-v1alpha1.json. Each schema written is standalone (every
$ref inlined) and strict (an object with listed properties allows no
others, so a misspelt field fails), as kubeconform's own
"-standalone-strict" schemas are. A kind found in neither source is an
error naming it: nothing is skipped unvalidated.
"""

import json
import os
import sys

import yaml


def suffix(group, version):
    return f"-{group.split('.')[0]}-{version}" if group else f"-{version}"


def strict(schema):
    """Objects with properties take no others, recursively (in place)."""
    if isinstance(schema, dict):
        if "properties" in schema and "additionalProperties" not in schema \
                and not schema.get("x-kubernetes-preserve-unknown-fields"):
            schema["additionalProperties"] = False
        for value in schema.values():
            strict(value)
    elif isinstance(schema, list):
        for value in schema:
            strict(value)
    return schema


def inline(schema, definitions, seen=()):
    """`schema` with every #/definitions/ reference replaced by its target;
    a reference back into itself (recursive types) allows anything."""
    if isinstance(schema, list):
        return [inline(s, definitions, seen) for s in schema]
    if not isinstance(schema, dict):
        return schema
    ref = schema.get("$ref")
    if ref:
        name = ref.rsplit("/", 1)[-1]
        if name in seen:
            return {}
        return inline(definitions[name], definitions, seen + (name,))
    out = {k: inline(v, definitions, seen) for k, v in schema.items()}
    # IntOrString and Quantity: written either way in YAML.
    if out.get("format") == "int-or-string":
        return {"oneOf": [{"type": "string"}, {"type": "integer"}]}
    return out


def kubernetes_schemas(swagger_path):
    with open(swagger_path) as f:
        definitions = json.load(f)["definitions"]
    quantity = "io.k8s.apimachinery.pkg.api.resource.Quantity"
    if quantity in definitions:
        definitions[quantity] = {"oneOf": [{"type": "string"}, {"type": "number"}]}
    found = {}
    for name, schema in definitions.items():
        for gvk in schema.get("x-kubernetes-group-version-kind", []):
            found[(gvk["group"], gvk["version"], gvk["kind"])] = lambda name=name: inline(
                definitions[name], definitions, (name,))
    return found


def crd_schemas(crd_dir):
    found = {}
    for file in sorted(os.listdir(crd_dir)):
        if not file.endswith((".yaml", ".yml")):
            continue
        with open(os.path.join(crd_dir, file)) as f:
            for crd in yaml.safe_load_all(f):
                if not crd or crd.get("kind") != "CustomResourceDefinition":
                    continue
                spec = crd["spec"]
                for v in spec["versions"]:
                    schema = v.get("schema", {}).get("openAPIV3Schema")
                    if schema:
                        found[(spec["group"], v["name"], spec["names"]["kind"])] = lambda s=schema: s
    return found


def main():
    swagger, crd_dir, out, *manifests = sys.argv[1:]
    known = {**kubernetes_schemas(swagger), **crd_schemas(crd_dir)}
    os.makedirs(out, exist_ok=True)
    wanted = set()
    for path in manifests:
        with open(path) as f:
            for doc in yaml.safe_load_all(f):
                if doc:
                    group, _, version = doc["apiVersion"].rpartition("/")
                    wanted.add((group, version, doc["kind"]))
    missing = sorted(w for w in wanted if w not in known)
    if missing:
        sys.exit("kube-schemas: no schema for " + ", ".join(f"{g or 'core'}/{v} {k}" for g, v, k in missing))
    for group, version, kind in sorted(wanted):
        schema = strict(known[(group, version, kind)]())
        with open(os.path.join(out, f"{kind.lower()}{suffix(group, version)}.json"), "w") as f:
            json.dump(schema, f)
        print(f"kube-schemas: {group or 'core'}/{version} {kind}")


if __name__ == "__main__":
    main()
