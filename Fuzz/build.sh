#!/bin/sh
# Builds the libFuzzer binary for offlinepkg's parsers (Fuzz/*.swift) with ASan, from the OfflinePkg
# sources directly, since SwiftPM has no fuzzer product type. Run from the repository top; scripts/fuzz
# builds and runs it.
set -eu
out=.build/fuzz
# The C targets get their module maps from SwiftPM; outside SwiftPM they need ones of their own.
for module in CSystemShims CByteLanes; do
    mkdir -p "$out/modules/$module"
    printf 'module %s {\n    header "%s"\n    export *\n}\n' "$module" "$PWD/Sources/$module/include/$module.h" \
        > "$out/modules/$module/module.modulemap"
done
clang -c -O1 -I Sources/CSystemShims/include Sources/CSystemShims/shims.c -o "$out/shims.o"
# Whole-module: the library is type-checked once rather than once per batch of files, and optimised
# across files as a release build is; LLVM's code generation runs on every core.
swiftc -sanitize=fuzzer,address -parse-as-library -O -g -wmo -num-threads "$(nproc)" \
    -module-name OfflinePkg -package-name offlinepkg \
    -I Sources/CCrypto -I Sources/CArchive -I Sources/CCurl -I "$out/modules/CSystemShims" -I "$out/modules/CByteLanes" \
    Fuzz/*.swift $(find Sources/OfflinePkg -name '*.swift') "$out/shims.o" \
    -lcrypto -larchive -lcurl -o "$out/offlinepkg-fuzz"
echo "built $out/offlinepkg-fuzz"
