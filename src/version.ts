/**
 * StayHub's version, as the API reports it (the OpenAPI document's `info.version`). The same as
 * package.json's and CHANGELOG.md's newest release: test/unit/version-changelog.test.ts keeps them
 * together. A constant rather than package.json read at run time, whose place differs between the
 * source tree and the built image.
 */
export const VERSION = '0.3.0';
