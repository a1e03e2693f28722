/* Preprocessed by check_prototypes.cmake to list the functions nccl.h declares. */
#include <nccl.h>
