// sandbox
// timeout: 30s

// Counts words in a text; `top` is optional, as its default says.
export async function main(text: string, top: number = 3) {
  const counts = new Map<string, number>();
  for (const word of text.toLowerCase().match(/[\p{L}\p{N}']+/gu) ?? []) {
    counts.set(word, (counts.get(word) ?? 0) + 1);
  }
  const ranked = [...counts.entries()].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
  console.log(`counted ${counts.size} distinct words`);
  return {
    words: [...counts.values()].reduce((a, b) => a + b, 0),
    top: ranked.slice(0, top).map(([word, count]) => ({ word, count })),
  };
}
