#!/bin/sh
# Builds the libFuzzer binary for the minisign parsers (Fuzz/SignatureFuzz.swift) with ASan, from the
# OfflinePkg sources directly, since SwiftPM has no fuzzer product type. Run from the repository top:
#   Fuzz/build-signature-fuzz.sh && .build/fuzz/signature-fuzz -max_total_time=60 .build/fuzz/corpus
set -eu
out=.build/fuzz
mkdir -p "$out/modules/CSystemShims" "$out/corpus"
# The C shim target gets its module map from SwiftPM; outside SwiftPM it needs one of its own.
printf 'module CSystemShims {\n    header "%s"\n    export *\n}\n' "$PWD/Sources/CSystemShims/include/CSystemShims.h" \
    > "$out/modules/CSystemShims/module.modulemap"
clang -c -O1 -I Sources/CSystemShims/include Sources/CSystemShims/shims.c -o "$out/shims.o"
swiftc -sanitize=fuzzer,address -parse-as-library -O -g \
    -module-name OfflinePkg -package-name offlinepkg \
    -I Sources/CCrypto -I Sources/CArchive -I Sources/CCurl -I "$out/modules/CSystemShims" \
    Fuzz/SignatureFuzz.swift $(find Sources/OfflinePkg -name '*.swift') "$out/shims.o" \
    -lcrypto -larchive -lcurl -o "$out/signature-fuzz"
# Seed the corpus with a real signature and key, so the fuzzer starts from the interesting shapes.
if command -v minisign >/dev/null && [ ! -e "$out/corpus/seed.minisig" ]; then
    tmp=$(mktemp -d)
    minisign -G -W -p "$tmp/k.pub" -s "$tmp/k.key" >/dev/null
    echo seed > "$tmp/m"
    minisign -S -s "$tmp/k.key" -m "$tmp/m" >/dev/null
    cp "$tmp/m.minisig" "$out/corpus/seed.minisig"
    cp "$tmp/k.pub" "$out/corpus/seed.pub"
    rm -rf "$tmp"
fi
echo "built $out/signature-fuzz"
