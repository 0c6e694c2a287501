# Shared by bench/recipes/gpu_carry.sh and bench/recipes/duplex_carry.sh (sourced): what the GPU machine,
# which has no package registry, needs is downloaded here and cut into slices that each
# travel in one device call.

# download_wheels DIR SPEC_FILE...: every `name==version` of the files (comments dropped)
# as a cp312 manylinux wheel in DIR, skipping those already there; fails when any is missing.
download_wheels() {
  local dl=$1
  shift
  mkdir -p "$dl"
  cat "$@" | sed 's/#.*//' | grep . | while read -r spec; do
    name=$(echo "${spec%%==*}" | tr 'A-Z-' 'a-z_')
    ver=${spec##*==}
    ls "$dl" | tr 'A-Z-' 'a-z_' | grep -q "^${name}_${ver}[_.-]" && continue
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
      --platform manylinux_2_31_x86_64 --platform manylinux_2_34_x86_64 --platform manylinux_2_35_x86_64 \
      -q -d "$dl" "$spec" 2>&1 | grep -v WARNING || true
  done
  local want have
  want=$(cat "$@" | sed 's/#.*//' | grep -c .)
  have=$(ls "$dl"/*.whl | wc -l)
  [ "$have" -ge "$want" ] || { echo "only $have of $want wheels downloaded" >&2; return 1; }
}

# slice_payload DEST STAGE MIB: STAGE's wheels, models and site as one compressed stream cut
# into DEST/p0, p1, ... of MIB each (a slice plus the working tree stays under 64 MiB), with
# the stream's sha256 and the slice count in p0 for bench/recipes/gpu_install.sh. STAGE is removed.
slice_payload() {
  local dest=$1 stage=$2 mib=$3
  rm -rf "$dest"/p[0-9]*
  tar -C "$stage" -czf - wheels models site | split -b "${mib}m" -d -a 2 - "$dest/payload.part"
  (cd "$dest" && cat payload.part* | sha256sum | cut -d' ' -f1) > "$dest/payload.sha256"
  local n=0
  for part in "$dest"/payload.part*; do mkdir -p "$dest/p$n"; mv "$part" "$dest/p$n/"; n=$((n+1)); done
  cp "$dest/payload.sha256" "$dest/p0/"
  echo "$n" > "$dest/p0/slices"
  rm -rf "$stage"
  du -sh "$dest"/p*
  echo "$n slices"
}
