// Generated from the OpenRPC document of jsonrpc-peer web demo 0.1.0 by
// tools/openrpc-to-ts.mjs: do not edit. CI regenerates it and fails when it differs.
import type { HandlerContext, ReconnectingPeer, TopicFollower, TopicOptions } from 'jsonrpc-peer';

/**
 * @minItems 2
 * @maxItems 2
 */
export type SubtractPositional = [number, number];
export type SubtractResult = number;
export type SumParams = number[];
export type SumResult = number;
/**
 * @minItems 2
 * @maxItems 2
 */
export type GetDataResult = [string, number];
export type UpdateParams = unknown[];
export type NotifyHelloParams = unknown[];
export type NotifySumParams = unknown[];
/**
 * @minItems 1
 * @maxItems 1
 *
 * Items: How long the task runs: more than 0, at most 600.
 */
export type DemoLongTaskPositional = [number];
export type DemoLongTaskResult = string;
export type DemoTasksRunningResult = number;
/**
 * @minItems 2
 * @maxItems 2
 */
export type ChatSendPositional = [string, string];
/**
 * @minItems 1
 * @maxItems 3
 */
export type SubscribePositional =
  [string] | [string, TopicPosition | null] | [string, TopicPosition | null, ChatPresenceInfo | null];
/**
 * `subscribe`'s answer: a position on a topic with history, a boolean on one without.
 */
export type SubscribeResult = Subscribed | boolean;
/**
 * @minItems 1
 * @maxItems 1
 */
export type UnsubscribePositional = [string];
export type UnsubscribeResult = boolean;
/**
 * @minItems 1
 * @maxItems 1
 */
export type PresencePositional = [string];
export type PresenceResult = ChatMember[];
/**
 * @minItems 1
 * @maxItems 1
 */
export type PresenceCountPositional = [string];
export type PresenceCountResult = number;
/**
 * @minItems 4
 * @maxItems 4
 */
export type MetricsPositional = [number, number, number, number];
/**
 * One `chat.message` notification: a chat line on the chat topic. Where the topic keeps
 * history (by default, on one server and across servers) it is
 * `{"offset":N,"data":LINE}`; where it keeps none (`--chat-history 0`) it is the line.
 */
export type ChatMessageParams = ChatItem | ChatMessage;
/**
 * @minItems 3
 * @maxItems 3
 */
export type PresenceJoinPositional = [string, string, ChatMemberInfo];
/**
 * @minItems 3
 * @maxItems 3
 */
export type PresenceLeavePositional = [string, string, ChatMemberInfo];

export interface SubtractParams {
  /**
   * The number to subtract from.
   */
  minuend: number;
  /**
   * The number subtracted.
   */
  subtrahend: number;
}
export interface DemoLongTaskParams {
  /**
   * How long the task runs: more than 0, at most 600.
   */
  seconds: number;
}
/**
 * `demo.ask_browser`'s answer: the page's own description and the round trip's time.
 */
export interface DemoAskBrowserResult {
  /**
   * What the page answered.
   */
  answer: UiDescription;
  /**
   * The method the server called on the page.
   */
  asked: string;
  /**
   * From the server's call to the page's answer.
   */
  elapsed_ms: number;
}
/**
 * What the page says about itself when the server asks.
 */
export interface UiDescription {
  /**
   * `navigator.language`.
   */
  language: string;
  /**
   * The page's clock, ISO 8601.
   */
  time: string;
  /**
   * `navigator.userAgent`.
   */
  userAgent: string;
  /**
   * The window's size.
   */
  viewport: Viewport;
}
/**
 * The page's window, as `ui.describe` reports it.
 */
export interface Viewport {
  /**
   * CSS pixels.
   */
  height: number;
  /**
   * CSS pixels.
   */
  width: number;
}
export interface ChatSendParams {
  /**
   * 1 to 40 characters.
   */
  name: string;
  /**
   * 1 to 500 characters.
   */
  text: string;
}
/**
 * How many pages of this server a chat line reached.
 */
export interface ChatSendResult {
  /**
   * Pages of this server the line was queued for (across servers, the other servers'
   * pages get it too and are not counted).
   */
  delivered: number;
}
/**
 * `chat.recent`'s answer.
 */
export interface ChatRecentResult {
  /**
   * The epoch the offsets are in; null before the first line, or without history.
   */
  epoch?: string | null;
  /**
   * The last lines (at most 50), oldest first.
   */
  lines: RecentLine[];
}
/**
 * A line of `chat.recent`, with its offset.
 */
export interface RecentLine {
  /**
   * The server's clock when it arrived, milliseconds since 1970.
   */
  at_ms: number;
  /**
   * Who wrote it.
   */
  name: string;
  /**
   * Its offset in the chat topic's history; null where the topic keeps none.
   */
  offset?: number | null;
  /**
   * What they wrote.
   */
  text: string;
}
export interface SubscribeParams {
  /**
   * The topic: `chat.message`.
   */
  topic: string;
  /**
   * Where to resume from: everything published after it is sent first.
   */
  from?: TopicPosition | null;
  /**
   * Join the topic's presence with this info (at most 1 KiB as JSON); with
   * `"presence": true` in it, also get `presence.join` and `presence.leave`.
   */
  info?: ChatPresenceInfo | null;
}
/**
 * A place in a topic's history: `subscribe`'s position to resume from.
 */
export interface TopicPosition {
  /**
   * Names one history of the topic; changes when it is lost (a server restart).
   */
  epoch: string;
  /**
   * The offset of the last publication received.
   */
  offset: number;
}
/**
 * What a page joins the chat's presence with.
 */
export interface ChatPresenceInfo {
  /**
   * The name the page chats under.
   */
  name: string;
  /**
   * Ask for `presence.join` / `presence.leave` (taken out of what the others see).
   */
  presence?: boolean | null;
}
/**
 * Where a subscription to a topic with history starts.
 */
export interface Subscribed {
  /**
   * The topic's epoch.
   */
  epoch: string;
  /**
   * The newest offset when the subscription took effect.
   */
  offset: number;
  /**
   * Given a position: whether everything after it was sent (false: nothing was, the
   * position is no longer kept; fetch the state afresh).
   */
  recovered?: boolean | null;
}
/**
 * One member of the chat: a connected page (a person in two tabs is two members).
 */
export interface ChatMember {
  /**
   * The page's connection, `NODE/ID` (`local/ID` without a cluster).
   */
  addr: string;
  /**
   * What it joined with: `{"name": ...}`.
   */
  info: ChatMemberInfo;
}
/**
 * What the other pages see of a member.
 */
export interface ChatMemberInfo {
  /**
   * The name it chats under.
   */
  name: string;
}
/**
 * What the page says about itself when the server asks.
 */
export interface UiDescribeResult {
  /**
   * `navigator.language`.
   */
  language: string;
  /**
   * The page's clock, ISO 8601.
   */
  time: string;
  /**
   * `navigator.userAgent`.
   */
  userAgent: string;
  /**
   * The window's size.
   */
  viewport: Viewport;
}
export interface MetricsParams {
  /**
   * Counts pushes since the server started.
   */
  seq: number;
  /**
   * The server's clock, milliseconds since 1970.
   */
  time_ms: number;
  /**
   * Pages connected now.
   */
  connections: number;
  /**
   * A wave with some noise.
   */
  value: number;
}
/**
 * A chat line and its offset in the chat topic's history.
 */
export interface ChatItem {
  /**
   * The line.
   */
  data: ChatMessage;
  /**
   * From 1, each line the previous + 1 (within one epoch of the history).
   */
  offset: number;
}
/**
 * One chat line, as the chat topic (`chat.message`) publishes it.
 */
export interface ChatMessage {
  /**
   * The server's clock when it arrived, milliseconds since 1970.
   */
  at_ms: number;
  /**
   * Who wrote it.
   */
  name: string;
  /**
   * What they wrote.
   */
  text: string;
}
export interface PresenceJoinParams {
  /**
   * The topic: `chat.message`.
   */
  topic: string;
  /**
   * The page's connection.
   */
  addr: string;
  /**
   * What it joined with.
   */
  info: ChatMemberInfo;
}
export interface PresenceLeaveParams {
  /**
   * The topic: `chat.message`.
   */
  topic: string;
  /**
   * The page's connection.
   */
  addr: string;
  /**
   * What it joined with.
   */
  info: ChatMemberInfo;
}

/** Methods the server serves: the page calls them. */
export interface ServerMethods {
  "subtract": { params: SubtractParams | SubtractPositional; result: SubtractResult };
  "sum": { params: SumParams; result: SumResult };
  "get_data": { params: [] | undefined; result: GetDataResult };
  "demo.long_task": { params: DemoLongTaskParams | DemoLongTaskPositional; result: DemoLongTaskResult };
  "demo.tasks_running": { params: [] | undefined; result: DemoTasksRunningResult };
  "demo.ask_browser": { params: [] | undefined; result: DemoAskBrowserResult };
  "chat.send": { params: ChatSendParams | ChatSendPositional; result: ChatSendResult };
  "chat.recent": { params: [] | undefined; result: ChatRecentResult };
  "subscribe": { params: SubscribeParams | SubscribePositional; result: SubscribeResult };
  "unsubscribe": { params: UnsubscribePositional; result: UnsubscribeResult };
  "presence": { params: PresencePositional; result: PresenceResult };
  "presence_count": { params: PresenceCountPositional; result: PresenceCountResult };
}
/** Methods the page serves (`x-implemented-by: client`): the server calls them. */
export interface ClientMethods {
  "ui.describe": { params: [] | undefined; result: UiDescribeResult };
}
/** Notifications the server sends: the page handles them. */
export interface ServerNotifications {
  "metrics": MetricsParams | MetricsPositional;
  "chat.message": ChatMessageParams;
  "presence.join": PresenceJoinParams | PresenceJoinPositional;
  "presence.leave": PresenceLeaveParams | PresenceLeavePositional;
}
/** Notifications the page sends: the server handles them. */
export interface ClientNotifications {
  "update": UpdateParams;
  "notify_hello": NotifyHelloParams;
  "notify_sum": NotifySumParams;
}

type CallOptions = Parameters<ReconnectingPeer['call']>[2];
type Args<P> = [] extends P ? [params?: P, options?: CallOptions] : undefined extends P ? [params?: P, options?: CallOptions] : [params: P, options?: CallOptions];
type Answer<R> = R | Promise<R>;
/** What a followed topic hands over: the `data` of a notification on a topic with history, else its params. */
type DataOf<P> = P extends { offset: number; data: infer D } ? D : P;

/** The page's peer seen through this API: only described names, with their types. */
export interface TypedPeer {
  call<M extends keyof ServerMethods>(method: M, ...args: Args<ServerMethods[M]['params']>): Promise<ServerMethods[M]['result']>;
  notify<N extends keyof ClientNotifications>(method: N, ...args: Args<ClientNotifications[N]>): Promise<void>;
  method<M extends keyof ClientMethods>(name: M, handler: (cx: HandlerContext, params: ClientMethods[M]['params']) => Answer<ClientMethods[M]['result']>): this;
  notification<N extends keyof ServerNotifications>(name: N, handler: (cx: HandlerContext, params: ServerNotifications[N]) => unknown): this;
  topic<N extends keyof ServerNotifications>(name: N, options?: TopicOptions<DataOf<ServerNotifications[N]>>): TopicFollower;
}

/** A ReconnectingPeer typed by this API: cast what reconnecting() returns to it. */
export type DemoPeer = TypedPeer & Omit<ReconnectingPeer, 'call' | 'notify' | 'method' | 'notification' | 'topic'>;
