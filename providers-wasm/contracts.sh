# The guest crates by contract, for build.sh and the lint and unit tasks (source it). Cargo unifies
# features within one build and a guest's SDK feature (`v0_2` to `v0_5`) picks the contract
# it is built against, so each group is built, linted and tested on its own. The SDK is in the 0.1
# group (no feature) and in the newest (all of its features on), so both ends are checked.
#
# guest_groups: one line per group, the contract and then its cargo packages.
guest_groups() {
  cat <<'GROUPS'
0.1 capstan-provider-sdk capstan-fixture-chaos capstan-fixture-chaos-catalog
0.2 capstan-fixture-egress
0.3 capstan-provider-clusterapi
0.4 capstan-provider-cloudstack
0.5 capstan-provider-sdk capstan-provider-kwok
GROUPS
}

# guest_artifact PACKAGE: the component a package builds (its lib name), or nothing for a library.
guest_artifact() {
  case "$1" in
    capstan-fixture-chaos) echo chaos ;;
    capstan-fixture-egress) echo egress ;;
    capstan-provider-cloudstack) echo cloudstack ;;
    capstan-provider-kwok) echo kwok ;;
    capstan-provider-clusterapi) echo clusterapi ;;
  esac
}
