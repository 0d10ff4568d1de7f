// Test support: temp roots, fixture servers.
