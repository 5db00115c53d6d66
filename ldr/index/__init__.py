"""Storage: manifests and generations, segments, the docstore, the write lock, index stores, and the
build, check, merge and Ray drivers. Component formats live in ldr/components/; nothing here
imports the query side (ldr/search/)."""
