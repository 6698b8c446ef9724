#!/usr/bin/env bash
# data.sh: fetch mantissa's default data sets from Debian packages on first
# use, into $MANTISSA_DATA (default <repo>/.cache/data):
#   austen.txt       Jane Austen's six novels (r-cran-janeaustenr), UTF-8,
#                    in publication order, lines joined with newlines
#   fashion-mnist/   {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz
#                    (dataset-fashion-mnist)
# Needs apt-get (no root: `apt-get download` + `dpkg-deb -x`) and python3.
# Idempotent and quiet: prints only the two paths.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DATA=${MANTISSA_DATA:-$ROOT/.cache/data}
CORPUS=$DATA/austen.txt
FMNIST=$DATA/fashion-mnist
FMNIST_FILES=(train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz)

have_fmnist() {
  local f
  for f in "${FMNIST_FILES[@]}"; do [[ -s $FMNIST/$f ]] || return 1; done
}

need=()
[[ -s $CORPUS ]] || need+=(r-cran-janeaustenr)
have_fmnist || need+=(dataset-fashion-mnist)

if ((${#need[@]})); then
  mkdir -p "$DATA"
  WORK=$(mktemp -d "$DATA/.fetch.XXXXXX")
  trap 'rm -rf "$WORK"' EXIT
  fetch() { (cd "$WORK" && apt-get download "${need[@]}") >"$WORK/apt.log" 2>&1; }
  # A fresh machine may have empty package lists: refresh them once if we can.
  if ! fetch; then
    if [[ $(id -u) -eq 0 ]]; then apt-get update -qq >/dev/null 2>&1 || true; fi
    if ! fetch; then
      cat "$WORK/apt.log" >&2
      echo "data.sh: 'apt-get download ${need[*]}' failed; on a fresh machine run 'sudo apt-get update' first" >&2
      exit 1
    fi
  fi
  for deb in "$WORK"/*.deb; do dpkg-deb -x "$deb" "$WORK/root"; done

  if [[ " ${need[*]} " == *" r-cran-janeaustenr "* ]]; then
    python3 - "$WORK/root/usr/lib/R/site-library/janeaustenr/data" "$CORPUS.tmp" <<'PY'
# Jane Austen's novels from R's lazy-load database: Rdata.rdx (gzip'ed R
# serialisation of list(variables = list(name = c(offset, length)), ...))
# indexes Rdata.rdb, whose records are a 4-byte big-endian uncompressed
# length followed by a zlib stream holding an R XDR serialisation of one
# character vector (one element per line of the novel).
import gzip, struct, sys, zlib

ORDER = ["sensesensibility", "prideprejudice", "mansfieldpark", "emma", "northangerabbey", "persuasion"]

class RReader:
    """The subset of R's XDR serialisation format these files use."""
    def __init__(self, data):
        if data[:2] != b"X\n":
            raise ValueError("not an XDR R serialisation")
        self.d, self.p, self.refs = data, 2, []
        version = self.int()
        self.int(); self.int()  # writer and minimal reader R versions
        if version == 3:
            n = self.int()  # native encoding name, skipped
            self.p += n
    def int(self):
        v = struct.unpack_from(">i", self.d, self.p)[0]
        self.p += 4
        return v
    def length(self):
        n = self.int()
        if n == -1:  # long vector: two 32-bit halves
            hi, lo = self.int(), self.int()
            n = (hi << 32) + (lo & 0xFFFFFFFF)
        return n
    def charsxp(self, flags):
        n = self.int()
        if n == -1:
            return None  # NA_STRING
        raw = self.d[self.p:self.p + n]
        self.p += n
        levels = flags >> 12
        if levels & 4:  # LATIN1_MASK
            return raw.decode("latin-1")
        return raw.decode("utf-8")
    def item(self):
        flags = self.int()
        t, has_attr, has_tag = flags & 0xFF, flags & (1 << 9), flags & (1 << 10)
        if t == 254: return None                       # NILVALUE_SXP
        if t == 255:                                   # REFSXP
            i = flags >> 8
            return self.refs[(i if i else self.int()) - 1]
        if t == 1:                                     # SYMSXP
            name = self.item()
            self.refs.append(name)
            return name
        if t == 9: return self.charsxp(flags)          # CHARSXP
        if t == 2:                                     # LISTSXP (pairlist)
            out = {}
            while True:
                if has_attr: self.item()
                tag = self.item() if has_tag else None
                out[tag] = self.item()
                flags = self.int()
                t, has_attr, has_tag = flags & 0xFF, flags & (1 << 9), flags & (1 << 10)
                if t == 254: return out
                if t != 2: raise ValueError("unexpected pairlist tail type %d" % t)
        if t in (10, 13):                              # LGLSXP, INTSXP
            n = self.length()
            v = list(struct.unpack_from(">%di" % n, self.d, self.p)); self.p += 4 * n
        elif t == 16:                                  # STRSXP
            v = [self.item() for _ in range(self.length())]
        elif t == 19:                                  # VECSXP
            v = [self.item() for _ in range(self.length())]
        else:
            raise ValueError("unsupported R type %d at byte %d" % (t, self.p - 4))
        if has_attr:
            attrs = self.item()
            if "names" in attrs and isinstance(v, list):
                v = dict(zip(attrs["names"], v))
        return v

src, out = sys.argv[1], sys.argv[2]
index = RReader(gzip.decompress(open(src + "/Rdata.rdx", "rb").read())).item()
db = open(src + "/Rdata.rdb", "rb").read()
parts = []
for name in ORDER:
    offset, length = index["variables"][name]
    record = db[offset:offset + length]
    size = struct.unpack(">I", record[:4])[0]
    payload = zlib.decompress(record[4:])
    if len(payload) != size:
        raise SystemExit("data.sh: %s: record of %s has %d bytes, header says %d" % (src, name, len(payload), size))
    lines = RReader(payload).item()
    parts.append("".join((line or "") + "\n" for line in lines))
with open(out, "w", encoding="utf-8", newline="\n") as f:
    f.write("".join(parts))
PY
    mv -f "$CORPUS.tmp" "$CORPUS"
  fi

  if [[ " ${need[*]} " == *" dataset-fashion-mnist "* ]]; then
    mkdir -p "$FMNIST"
    for f in "${FMNIST_FILES[@]}"; do
      cp "$WORK/root/usr/share/datasets/fashion-mnist/$f" "$FMNIST/$f.tmp"
      mv -f "$FMNIST/$f.tmp" "$FMNIST/$f"
    done
  fi
fi

echo "$CORPUS"
echo "$FMNIST"
