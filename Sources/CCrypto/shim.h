#ifndef OFFLINEPKG_CCRYPTO_SHIM_H
#define OFFLINEPKG_CCRYPTO_SHIM_H
#include <openssl/evp.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/err.h>
#endif
