#ifndef OFFLINEPKG_CCRYPTO_SHIM_H
#define OFFLINEPKG_CCRYPTO_SHIM_H
#include <openssl/evp.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/err.h>
#include <openssl/bio.h>
#include <openssl/ec.h>
#include <openssl/obj_mac.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

// BIO_get_mem_data is a macro over BIO_ctrl, which Swift does not import.
static inline long ccrypto_bio_mem_data(BIO *bio, char **data) {
    return BIO_get_mem_data(bio, data);
}
#endif
