# Sourced by the scripts that fetch packages (npm, pip): Node and pip trust
# only their own lists of certificate authorities, not the system's. Where
# traffic to the registries passes a proxy that presents its own CA (this
# machine kind's does; the system's bundle, from Debian's ca-certificates,
# holds it), they refuse the registries. Pointing them at the system's
# bundle trusts exactly what curl, apt and git already trust here.
if [ -r /etc/ssl/certs/ca-certificates.crt ]; then
    export NODE_EXTRA_CA_CERTS="${NODE_EXTRA_CA_CERTS:-/etc/ssl/certs/ca-certificates.crt}"
    export PIP_CERT="${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}"
fi
