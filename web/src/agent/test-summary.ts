/** The summary line of a test run: pytest's last line without its '=' rule, or the exit's meaning. */
export function testSummary(output: string, passed: boolean): string {
  const lines = output.trim().split('\n').map((l) => l.replace(/^=+\s*|\s*=+$/g, '').trim()).filter(Boolean);
  const summary = [...lines].reverse().find((l) => /\b\d+ (passed|failed|errors?|skipped|deselected)\b|no tests ran/.test(l));
  return summary ?? (passed ? 'The tests passed.' : lines.at(-1) ?? 'The tests failed.');
}
