#define _GNU_SOURCE
#include <unistd.h>
#include "CSystemShims.h"

int csystemshims_syncfs(int fd) {
    return syncfs(fd);
}
