#!/bin/sh
# Builds the libFuzzer binary for offlinepkg's parsers (Fuzz/*.swift) with ASan, from the OfflinePkg
# sources directly, since SwiftPM has no fuzzer product type. Run from the repository top; scripts/fuzz
# builds and runs it.
set -eu
out=.build/fuzz
mkdir -p "$out/modules/CSystemShims"
# The C shim target gets its module map from SwiftPM; outside SwiftPM it needs one of its own.
printf 'module CSystemShims {\n    header "%s"\n    export *\n}\n' "$PWD/Sources/CSystemShims/include/CSystemShims.h" \
    > "$out/modules/CSystemShims/module.modulemap"
clang -c -O1 -I Sources/CSystemShims/include Sources/CSystemShims/shims.c -o "$out/shims.o"
swiftc -sanitize=fuzzer,address -parse-as-library -O -g \
    -module-name OfflinePkg -package-name offlinepkg \
    -I Sources/CCrypto -I Sources/CArchive -I Sources/CCurl -I "$out/modules/CSystemShims" \
    Fuzz/*.swift $(find Sources/OfflinePkg -name '*.swift') "$out/shims.o" \
    -lcrypto -larchive -lcurl -o "$out/offlinepkg-fuzz"
echo "built $out/offlinepkg-fuzz"
