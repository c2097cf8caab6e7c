/* SPDX-License-Identifier: BSD-3-Clause */
/* A program built against an installed rlock, as a user would. */
#include <rlock/rlock.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
    printf("%s\n", rlock_version());
    return strcmp(rlock_version(), RLOCK_VERSION_STRING) != 0;
}
