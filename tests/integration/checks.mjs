// check() for the openai client scripts: prints each result and counts the
// failures; each script ends with a non-zero exit when failures() > 0.
let failureCount = 0;
export function check(condition, what) {
  if (!condition) {
    failureCount++;
    console.error(`FAIL: ${what}`);
  } else {
    console.log(`ok: ${what}`);
  }
}
export function failures() {
  return failureCount;
}
