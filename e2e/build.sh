#!/usr/bin/env bash
# Builds the upstream binaries `make e2e` runs, from their Go modules at the versions
# versions.env pins, into a cache outside the repository keyed by version:
# $E2E_CACHE/<component>-<version>/bin. A finished component is kept, so a warm run builds
# nothing. Needs only `go` and the Go module proxy. Prints each component's build time.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"
: "${E2E_CACHE:=${XDG_CACHE_HOME:-$HOME/.cache}/function-gpustack-e2e}"
export GOFLAGS="${GOFLAGS:--buildvcs=false}" CGO_ENABLED=0
mkdir -p "$E2E_CACHE"

log() { printf '%s build: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
built() { [ -e "$E2E_CACHE/$1-$2/.done" ]; }
finish() {
  touch "$E2E_CACHE/$1-$2/.done"
  log "$1 $2 built in $((SECONDS - $3)) s"
}

# install NAME VERSION LDFLAGS PACKAGE...: modules without replace directives install as they are.
install() {
  local name=$1 version=$2 ldflags=$3 start=$SECONDS
  shift 3
  built "$name" "$version" && return 0
  log "$name $version: go install $*"
  GOBIN="$E2E_CACHE/$name-$version/bin" go install -trimpath -ldflags "$ldflags" "${@/%/@$version}"
  finish "$name" "$version" "$start"
}

# wrapper NAME MODULE VERSION STAGING LDFLAGS PACKAGE...: `go install` refuses a module whose
# go.mod has replace directives, so a small wrapper module requires MODULE and carries its
# replacements: those naming a published version as they are, and those naming a folder of
# MODULE's own tree (k8s.io/kubernetes' staging modules) as that module at STAGING instead.
wrapper() {
  local name=$1 module=$2 version=$3 staging=$4 ldflags=$5 start=$SECONDS
  shift 5
  built "$name" "$version" && return 0
  local dir="$E2E_CACHE/$name-$version/wrapper" upstream
  mkdir -p "$dir"
  rm -f "$dir/go.mod" # an earlier, interrupted run's would stop `go mod download` here
  upstream=$(cd "$dir" && go mod download -json "$module@$version" |
    sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
  {
    echo "module gpustack.local/e2e/$name"
    grep -E '^(go|godebug) ' "$upstream"
    echo "require $module $version"
    echo "replace ("
    # single-line and block replacements alike: "<old> [v] => <new> [v]"
    sed -n -e 's/^replace[[:space:]]*\([^(].*=>.*\)$/\1/p' -e '/^replace[[:space:]]*(/,/^)/p' "$upstream" |
      { grep '=>' || true; } | sed 's,//.*,,' |
      awk -v staging="$staging" '{
        old = $1; n = split($0, side, "=>"); split(side[2], new, " ")
        if (new[1] ~ /^\./) { if (staging != "") print "\t" old " => " old " " staging }
        else print "\t" old " => " new[1] " " new[2]
      }'
    echo ")"
  } >"$dir/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport (\n' >"$dir/tools.go"
  printf '\t_ "%s"\n' "$@" >>"$dir/tools.go"
  printf ')\n' >>"$dir/tools.go"
  log "$name $version: wrapper module, go mod tidy"
  (cd "$dir" && go mod tidy)
  local package
  for package in "$@"; do
    log "$name $version: ${package##*/}"
    (cd "$dir" && go build -trimpath -ldflags "$ldflags" -o "../bin/${package##*/}" "$package")
  done
  finish "$name" "$version" "$start"
}

# kube-apiserver & co. must report their version (Kueue refuses a server that says v0.0.0).
k8s_minor=${KUBERNETES#v1.}
k8s_minor=${k8s_minor%%.*}
k8s_ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$KUBERNETES"
k8s_ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$k8s_minor"
k8s_ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
k8s_ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=$KUBERNETES"
k8s_ldflags+=" -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$k8s_minor"

total=$SECONDS
wrapper kubernetes k8s.io/kubernetes "$KUBERNETES" "v0.${KUBERNETES#v1.}" "$k8s_ldflags" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
install kine "$KINE" "-s -w" github.com/k3s-io/kine
install kwok "$KWOK" "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK#v}" sigs.k8s.io/kwok/cmd/kwok
install kueue "$KUEUE" "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE" sigs.k8s.io/kueue/cmd/kueue
wrapper nfd sigs.k8s.io/node-feature-discovery "$NFD" "$NFD" \
  "-s -w -X sigs.k8s.io/node-feature-discovery/pkg/version.version=$NFD" \
  sigs.k8s.io/node-feature-discovery/cmd/nfd-master
# The proxy serves some Crossplane releases but not the module's version list, which
# `go install` reads (for deprecations): the wrapper names the version and needs no list.
wrapper crossplane github.com/crossplane/crossplane/v2 "$CROSSPLANE" "" \
  "-s -w -X github.com/crossplane/crossplane/v2/internal/version.version=$CROSSPLANE" \
  github.com/crossplane/crossplane/v2/cmd/crossplane github.com/crossplane/crossplane/v2/cmd/crank
wrapper crossplane github.com/crossplane/crossplane "$CROSSPLANE_LEGACY" "" \
  "-s -w -X github.com/crossplane/crossplane/internal/version.version=$CROSSPLANE_LEGACY" \
  github.com/crossplane/crossplane/cmd/crossplane github.com/crossplane/crossplane/cmd/crank
# provider-kubernetes has no flag for its metrics' address and would take :8080, which
# Crossplane 1.x's RBAC manager holds (neither has a flag): its metrics are off ("0").
install provider-kubernetes "$PROVIDER_KUBERNETES" \
  "-s -w -X sigs.k8s.io/controller-runtime/pkg/metrics/server.DefaultBindAddress=0" \
  github.com/crossplane-contrib/provider-kubernetes/cmd/provider
install registry "$REGISTRY" "-s -w" github.com/distribution/distribution/v3/cmd/registry
install helm "$HELM" "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM" helm.sh/helm/v3/cmd/helm
log "all built in $E2E_CACHE ($((SECONDS - total)) s)"
