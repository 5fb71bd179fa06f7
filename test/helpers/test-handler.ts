import type { TopicName } from '../../src/messages/topics.ts';
import type { TopicHandler, TopicHandlerContext } from '../../src/messages/handler.ts';

/** A handler for tests; topics outside TOPICS have no payload schema and are allowed here. */
export function testHandler(
  name: string,
  topic: string,
  handle: (ctx: TopicHandlerContext<TopicName>) => Promise<void> = async () => {},
): TopicHandler<any> {
  return { name, topic: topic as TopicName, handle };
}
