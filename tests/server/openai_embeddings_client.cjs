// The official `openai` npm client's embeddings API against `tachyon serve --pooling last
// --normalize-embeddings` (a decoder model served as Qwen3-Embedding is): the client's default
// base64 answer decodes to the float answer exactly, vectors are unit length, a batch equals its
// inputs sent alone, `dimensions` shortens and re-normalizes, usage counts the tokens /tokenize
// counts, and an input longer than the context is a BadRequestError naming the limit.
//   node tests/server/openai_embeddings_client.cjs http://127.0.0.1:PORT/v1 MODEL
const assert = require('node:assert/strict');
const { OpenAI } = require('openai');

const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));

async function main() {
  const [baseURL, model] = process.argv.slice(2);
  const client = new OpenAI({ baseURL, apiKey: 'test-key', maxRetries: 0 });
  let checks = 0;

  // No encoding_format: the client asks for base64 and decodes it into numbers itself.
  const text = 'The quick brown fox jumps over the lazy dog';
  const viaBase64 = await client.embeddings.create({ model, input: text });
  const viaFloat = await client.embeddings.create({ model, input: text, encoding_format: 'float' });
  assert.equal(viaBase64.object, 'list');
  assert.equal(viaBase64.data.length, 1);
  assert.equal(viaBase64.data[0].object, 'embedding');
  assert.equal(viaBase64.data[0].index, 0);
  const a = viaBase64.data[0].embedding;
  const b = viaFloat.data[0].embedding;
  assert.ok(a.length > 0);
  assert.deepEqual(a, b.map(Math.fround));
  assert.ok(Math.abs(norm(a) - 1) < 1e-5, `norm ${norm(a)}`);
  checks++;

  const tokenized = await (await fetch(baseURL.replace(/\/v1$/, '') + '/tokenize', {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ model, prompt: text }),
  })).json();
  assert.equal(viaFloat.usage.prompt_tokens, tokenized.count);
  assert.equal(viaFloat.usage.total_tokens, tokenized.count);
  checks++;

  const batch = await client.embeddings.create({ model, input: ['first input', text], encoding_format: 'float' });
  assert.deepEqual(batch.data.map((d) => d.index), [0, 1]);
  assert.deepEqual(batch.data[1].embedding, b);
  assert.notDeepEqual(batch.data[0].embedding, b);
  checks++;

  const short = await client.embeddings.create({ model, input: text, dimensions: 8, encoding_format: 'float' });
  assert.equal(short.data[0].embedding.length, 8);
  const n8 = norm(b.slice(0, 8));
  short.data[0].embedding.forEach((x, i) => assert.ok(Math.abs(x - b[i] / n8) < 1e-6));
  checks++;

  await assert.rejects(client.embeddings.create({ model, input: new Array(600).fill(7) }), (err) => {
    assert.equal(err.status, 400);
    assert.equal(err.constructor.name, 'BadRequestError');
    assert.match(err.message, /context of 512 tokens/);
    return true;
  });
  checks++;

  console.log(`openai embeddings client: ${checks} checks passed`);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
