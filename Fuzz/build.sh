#!/bin/sh
# Builds the libFuzzer binary for offlinepkg's parsers (Fuzz/*.swift) with ASan, from the OfflinePkg
# sources directly, since SwiftPM has no fuzzer product type. Run from the repository top; scripts/fuzz
# builds and runs it.
set -eu
out=.build/fuzz
# The C targets get their module maps from SwiftPM; outside SwiftPM they need ones of their own.
for module in CSystemShims CByteLanes CArchive CCrypto CCurl; do
    mkdir -p "$out/modules/$module"
    printf 'module %s {\n    header "%s"\n    export *\n}\n' "$module" "$PWD/Sources/$module/include/$module.h" \
        > "$out/modules/$module/module.modulemap"
done
clang -c -O1 -I Sources/CSystemShims/include Sources/CSystemShims/shims.c -o "$out/shims.o"
# libarchive, libcrypto and libcurl are loaded at their first call, through these stubs (CSystemShims.h).
for module in CArchive CCrypto CCurl; do
    clang -c -O1 -I Sources/CSystemShims/include -I "Sources/$module/include" "Sources/$module/$module.c" -o "$out/$module.o"
done
# Whole-module: the library is type-checked once rather than once per batch of files, and optimised
# across files as a release build is; LLVM's code generation runs on every core. It runs inside $out,
# since the driver leaves the module's debugging files in its working directory.
top=$PWD
(cd "$out" && swiftc -sanitize=fuzzer,address -parse-as-library -O -g -wmo -num-threads "$(nproc)" \
    -module-name OfflinePkg -package-name offlinepkg \
    -I "$top/$out/modules/CArchive" -I "$top/$out/modules/CCrypto" -I "$top/$out/modules/CCurl" \
    -I "$top/$out/modules/CSystemShims" -I "$top/$out/modules/CByteLanes" \
    "$top"/Fuzz/*.swift $(find "$top/Sources/OfflinePkg" -name '*.swift') shims.o CArchive.o CCrypto.o CCurl.o \
    -o offlinepkg-fuzz)
echo "built $out/offlinepkg-fuzz"
