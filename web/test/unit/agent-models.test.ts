import { describe, expect, it } from 'vitest';
import { scriptedModel, toChatMessages } from '../../src/agent/models';

const request = {
  messages: [],
  tools: [],
  sampling: { temperature: 0, top_p: 1, top_k: 0, seed: 0, repeat_penalty: 1, presence_penalty: 0 },
  max_tokens: 16,
  enable_thinking: false,
};

describe('agent models', () => {
  it('replays scripted replies in order, streamed, then fails', async () => {
    const model = scriptedModel(['one two three', 'done']);
    const pieces: string[] = [];
    const first = await model.complete(request, (t) => (pieces.push(t), true));
    expect(first).toMatchObject({ text: 'one two three', finish: 'stop', generated_tokens: 3 });
    expect(pieces).toEqual(['one ', 'two ', 'three']);
    expect((await model.complete(request, () => true)).text).toBe('done');
    await expect(model.complete(request, () => true)).rejects.toThrow(/no more replies/);
  });

  it('stops streaming when the listener says so', async () => {
    const model = scriptedModel(['a b c d']);
    let n = 0;
    const reply = await model.complete(request, () => ++n < 2);
    expect(reply).toMatchObject({ text: 'a b ', finish: 'aborted' });
  });

  it('turns the agent messages into OpenAI chat messages', () => {
    const out = toChatMessages([
      { role: 'system', content: 'sys' },
      { role: 'assistant', content: '', reasoning_content: 'hmm', tool_calls: [{ name: 'Read', arguments: { file_path: 'a.py' } }] },
      { role: 'tool', content: '1\tx', name: 'Read' },
    ]);
    expect(out).toEqual([
      { role: 'system', content: 'sys' },
      {
        role: 'assistant',
        content: '',
        reasoning_content: 'hmm',
        tool_calls: [{ type: 'function', function: { name: 'Read', arguments: '{"file_path":"a.py"}' } }],
      },
      { role: 'tool', content: '1\tx', name: 'Read' },
    ]);
  });
});
