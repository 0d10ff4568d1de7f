# offlinepkg — the two commands a fresh machine needs: `make demo` and `make test`.
SHELL := /bin/bash
SWIFT ?= swift
# Debian packages: build libraries, then the real parts the tests run against.
APT_PACKAGES := libarchive-dev libssl-dev libcurl4-openssl-dev libmicrohttpd-dev libzstd-dev libsqlite3-dev pkg-config \
	libarchive-tools zstd curl openssl nginx minisign chromium wrk time jq strace \
	libwebkit2gtk-4.1-dev xvfb xauth fonts-dejavu-core python3 lzop lrzip cpio valgrind iproute2 sqlite3 python3.11-doc man-db
DEMO_URL := https://demo.offlinepkg.test/

.PHONY: deps build release demo test fuzz bench clean install fleet example-webkit readme-snippets

deps:
	@missing=$$(for p in $(APT_PACKAGES); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing:" $$missing; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

build: deps
	$(SWIFT) build

release: deps
	$(SWIFT) build -c release

demo: build
	@root=$$(mktemp -d /tmp/offlinepkg-demo.XXXXXX); \
	bin=$$($(SWIFT) build --show-bin-path)/offlinepkg; \
	echo "\$$ offlinepkg sync file://$(CURDIR)/Fixtures/demo-repo/manifest.json --root $$root"; \
	$$bin sync "file://$(CURDIR)/Fixtures/demo-repo/manifest.json" --root "$$root" && \
	echo && echo "\$$ offlinepkg lookup $(DEMO_URL) --root $$root --json" && \
	$$bin lookup "$(DEMO_URL)" --root "$$root" --json && \
	echo && echo "\$$ offlinepkg lookup $(DEMO_URL)docs/guide/ --root $$root" && \
	$$bin lookup "$(DEMO_URL)docs/guide/" --root "$$root" && \
	echo && $$bin status --root "$$root"

# How many tests the side-by-side run of `make test` runs at once: enough to overlap tests that wait on
# servers and children, few enough that each keeps the pace its own timeouts expect. Unbounded, Swift
# Testing starts every test at once: a hundred nginx servers, and more time polling than testing.
TEST_WIDTH ?= 4

# Every check and every test; fails if any part fails. scripts/test-all gives the order and why: the
# static checks; one build of everything; the suites that measure time, one test at a time, with
# everything that measures no time beside them, niced (every other suite side by side, the examples,
# the protocol example, the benchmark smoke, the fuzz run); last, the suites that need the machine alone.
test: deps
	SWIFT="$(SWIFT)" TEST_WIDTH=$(TEST_WIDTH) scripts/test-all

# The examples and the README's snippets are packages of their own that depend on this one as a host
# app's would. They build in this package's .build: SwiftPM finds the library's compile commands
# unchanged and reuses what `swift build` made, where a .build of their own compiled it again for each.
# Sharing it, SwiftPM must plan each package's build anew: its cached plan is the last package's, and
# with it an example's build reports "Build complete!" having linked nothing.
EXAMPLE_BUILD := --scratch-path $(CURDIR)/.build --disable-build-manifest-caching

# The host-app example links the OfflinePkg product as an outside package would, and runs against
# the demo repository (scripts/example-host).
example:
	$(SWIFT) build --package-path Examples/HostShell $(EXAMPLE_BUILD)
	SHELL_BIN=$$($(SWIFT) build --package-path Examples/HostShell $(EXAMPLE_BUILD) --show-bin-path)/HostShell \
		scripts/example-host

# The WebKitGTK shell (Examples/WebKitShell) under Xvfb: release 1's title, then release 2's after
# a republish and the shell's background sync (scripts/example-webkit).
example-webkit: build
	$(SWIFT) build --package-path Examples/WebKitShell $(EXAMPLE_BUILD)
	OFFLINEPKG=$$($(SWIFT) build --show-bin-path)/offlinepkg \
		SHELL_BIN=$$($(SWIFT) build --package-path Examples/WebKitShell $(EXAMPLE_BUILD) --show-bin-path)/WebKitShell scripts/example-webkit

# Every Swift snippet of README.md compiles against the library (scripts/readme-snippets).
readme-snippets:
	scripts/readme-snippets

# The long fuzz run: FUZZ_SECONDS per parser.
fuzz: deps
	FUZZ_SECONDS=$${FUZZ_SECONDS:-600} scripts/fuzz

# The benchmark suite (Benchmarks/bench; docs/performance.md): every row on release builds, results in
# bench-out/results.json. ROWS="sync-cold serve-load" for some rows only.
bench: release
	Benchmarks/bench $(ROWS)

# `make install [PREFIX=/usr/local] [DESTDIR=...]`: the release binary, stripped (its symbols and debug
# information are half its size and nothing on a device reads them), and the man page. BIN=path installs
# a binary built elsewhere (the install test passes the one under test instead of building a release).
PREFIX ?= /usr/local
BIN ?=
install: $(if $(BIN),,release)
	install -D -m 755 -s "$(or $(BIN),$$($(SWIFT) build -c release --show-bin-path)/offlinepkg)" "$(DESTDIR)$(PREFIX)/bin/offlinepkg"
	install -D -m 644 man/offlinepkg.1 "$(DESTDIR)$(PREFIX)/share/man/man1/offlinepkg.1"

# The fleet simulation: a caching nginx edge in front of an nginx origin, a few hundred device roots.
fleet: build
	OFFLINEPKG=$$($(SWIFT) build --show-bin-path)/offlinepkg scripts/fleet

# Formats the Swift sources with the toolchain's swift-format and the committed .swift-format.
format:
	$(SWIFT) format --configuration .swift-format -r -i Sources Tests Examples Fuzz Package.swift

clean:
	rm -rf .build
