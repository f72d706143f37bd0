/**
 * A place in a topic's history: the `offset` of a publication (from 1, each the previous
 * + 1) in an `epoch`, an opaque string that changes when the history is lost (a server
 * restart, on one node). On the wire `{"epoch":"...","offset":42}`.
 * @typedef {object} Position
 * @property {string} epoch
 * @property {number} offset
 */
/**
 * Where a followed topic stands, given with each data and each missed report. On a topic
 * without history (the server answered `subscribe` with a boolean) `epoch` is `''` and
 * `offset` 0.
 * @typedef {object} TopicInfo
 * @property {string} topic the topic's name
 * @property {string} epoch the epoch the data is in (or continues in, after a miss)
 * @property {number} offset the data's offset; after a miss, the newest offset not
 *   received: data continues from the next
 */
/**
 * An answer to a follower's `subscribe`, as `onSubscribed` gets it.
 * @typedef {object} Subscription
 * @property {string} topic the topic's name
 * @property {boolean} history whether the topic keeps history (false: the server
 *   answered with a boolean; every reconnect may lose some, and is reported as missed)
 * @property {string} epoch the topic's epoch (`''` without history)
 * @property {number} offset the newest offset when the subscription took effect (0
 *   without history)
 * @property {Position | null} from the position subscribed from, or null (the first
 *   time, or after the position was given up)
 * @property {boolean} [recovered] with a position: whether everything after it was
 *   replayed (`false`: nothing was, and `onMissed` follows); absent without one
 */
/**
 * A member of a topic's presence, as `presence [topic]` lists it: one connection (a user
 * in two tabs is two members with one info).
 * @typedef {object} Member
 * @property {string} addr the member's connection: `NODE/ID` (`local/ID` without a cluster)
 * @property {any} info what it joined with (its `presence` member taken out)
 */
/**
 * A join or a leave: the params of `presence.join` and `presence.leave`
 * (`{"topic":"chat","addr":"b/7","info":{"user":"ana"}}`). A leave carries the info
 * the member joined with; a watcher is not told of its own join or leave.
 * @typedef {object} PresenceChange
 * @property {string} topic the topic joined or left
 * @property {string} addr the member's connection
 * @property {any} info what it joined with
 */
/**
 * How a ReconnectingPeer follows a topic (`link.topic(name, options)`).
 * @template [T=any]
 * @typedef {object} TopicOptions
 * @property {(data: T, info: TopicInfo) => void} [onData] each publication's data (the
 *   notification's `params.data`; on a topic without history, its params), in offset
 *   order, once across reconnects
 * @property {(info: TopicInfo) => void} [onMissed] publications were lost: the position
 *   could not be resumed (outside the server's history, or of an epoch it no longer
 *   has), the offsets jumped, the server reported a gap (`$/gap`), or the topic keeps no
 *   history and the link came back. Fetch the state afresh; data continues after
 *   `info.offset` in `info.epoch`.
 * @property {(subscription: Subscription) => void} [onSubscribed] each answer to the
 *   follower's subscribe (after every connect), before what it held is handed over
 * @property {(error: Error, topic: string) => void} [onFailed] subscribing failed (an
 *   error answer, an answer that is not a subscription, no answer in time), or a
 *   notification is not `{"offset":N,"data":...}` (it is skipped). An error answer
 *   leaves the topic unsubscribed on this connection; no answer in time closes the
 *   connection, so that the next one subscribes again. A connection that closes while
 *   the subscribe waits is not a failure: the next one subscribes.
 * @property {any | (() => any)} [info] join the topic's presence with this (any JSON but
 *   null, such as `{"user": "ana"}`; a function is asked again at every subscribe): the
 *   subscribe call's third param, `[topic, position_or_null, info]`
 * @property {boolean} [presence=false] also hear who comes and goes: `presence: true` is
 *   added to `info` (which must then be an object, or absent: `{}`), so the server sends
 *   `presence.join` / `presence.leave` for the topic, and the follower keeps `members`
 *   live (read again after every reconnect)
 * @property {(change: PresenceChange) => void} [onJoin] another member joined (on any node)
 * @property {(change: PresenceChange) => void} [onLeave] another member left (it
 *   unsubscribed, its connection ended, or its node went)
 * @property {(members: Member[]) => void} [onPresence] with `presence`: the members, each
 *   time they change (after each read of `presence [topic]`, and each join and leave)
 * @property {string} [presenceMethod='presence'] the method that lists the members
 * @property {string} [presenceCountMethod='presence_count'] the method that counts them
 * @property {string} [method='subscribe'] the method that subscribes
 * @property {(topic: string, from: Position | null, info?: any) => Array<any>|object} [params] the
 *   subscribe call's params; default `[topic]`, or `[topic, {"epoch":E,"offset":K}]` with
 *   a position (the form of the Rust `TopicMethods` and `push_ticker --history N`), and
 *   `[topic, position_or_null, info]` with `info` or `presence`. The
 *   answer must be theirs too: `{"epoch":E,"offset":K,"recovered"?:bool}`, or a boolean
 *   for a topic without history.
 * @property {string | null} [unsubscribeMethod='unsubscribe'] what `stop()` calls with
 *   `[topic]` on the current connection; null: nothing
 * @property {Position} [from] where to start the first time: a position kept from an
 *   earlier page (`follower.position`, say in sessionStorage); default none
 * @property {number} [maxHeld=10000] notifications held while a subscribe answer is
 *   awaited; past it the position is given up, the connection closed (4008), and the
 *   next subscription is reported as missed
 * @property {number} [maxHeldBytes=67108864] the same notifications' size (the length of
 *   their params' JSON text, 64 MiB by default); past it, as past `maxHeld`
 * @property {number} [timeoutMs] the subscribe call's timeout; default the link's
 */
/**
 * What a follower needs from the ReconnectingPeer that owns it.
 * @typedef {object} FollowerHost
 * @property {() => number} timeoutMs the link's default timeout
 * @property {(error: unknown, where: string) => void} report a throwing callback
 * @property {() => import('./peer.js').Peer | null} current the open connection, if any
 * @property {(follower: TopicFollower) => void} forget stops routing to `follower`
 * @property {(method: string, params: any[]) => Promise<any>} call a call on the link,
 *   waiting for it if it is down
 */
/** The notification that tells a watcher a member joined: params a PresenceChange. */
export const PRESENCE_JOIN: "presence.join";
/** The notification that tells a watcher a member left: params a PresenceChange. */
export const PRESENCE_LEAVE: "presence.leave";
/** The internal side of a follower, for reconnect.js only (set in the class's static block). */
export let followers: any;
/**
 * A topic a ReconnectingPeer follows: made by `link.topic(name, options)`, which see.
 */
export class TopicFollower {
    /**
     * Made by `ReconnectingPeer.topic`; not to be called directly.
     * @param {string} topic @param {TopicOptions} options @param {FollowerHost} host
     */
    constructor(topic: string, options: TopicOptions, host: FollowerHost);
    /** The topic's name. */
    get topic(): string;
    /**
     * The position of the last data handed over (or of the last miss reported); null before
     * the first subscription answered, and on a topic without history. Keep it to resume
     * from in another page (`from`).
     * @returns {Position | null}
     */
    get position(): Position | null;
    /**
     * With `presence`: the members as last read and changed since, on every node (this
     * link's own connection among them); null while not read yet on this connection.
     * @returns {Member[] | null}
     */
    get members(): Member[] | null;
    /**
     * The topic's members on every node, asked now (`presence [topic]`), waiting for the
     * link if it is down.
     * @returns {Promise<Member[]>}
     */
    presence(): Promise<Member[]>;
    /**
     * How many members the topic has on every node (`presence_count [topic]`): connections,
     * not users; count distinct infos of `presence()` for users.
     * @returns {Promise<number>}
     */
    presenceCount(): Promise<number>;
    /** Whether `stop()` was called. */
    get stopped(): boolean;
    /**
     * Stop following: no more callbacks, no subscribing on later connections. The current
     * connection, if any, is sent `unsubscribeMethod [topic]` (its answer not awaited).
     */
    stop(): void;
    #private;
}
/**
 * A place in a topic's history: the `offset` of a publication (from 1, each the previous
 * + 1) in an `epoch`, an opaque string that changes when the history is lost (a server
 * restart, on one node). On the wire `{"epoch":"...","offset":42}`.
 */
export type Position = {
    epoch: string;
    offset: number;
};
/**
 * Where a followed topic stands, given with each data and each missed report. On a topic
 * without history (the server answered `subscribe` with a boolean) `epoch` is `''` and
 * `offset` 0.
 */
export type TopicInfo = {
    /**
     * the topic's name
     */
    topic: string;
    /**
     * the epoch the data is in (or continues in, after a miss)
     */
    epoch: string;
    /**
     * the data's offset; after a miss, the newest offset not
     * received: data continues from the next
     */
    offset: number;
};
/**
 * An answer to a follower's `subscribe`, as `onSubscribed` gets it.
 */
export type Subscription = {
    /**
     * the topic's name
     */
    topic: string;
    /**
     * whether the topic keeps history (false: the server
     * answered with a boolean; every reconnect may lose some, and is reported as missed)
     */
    history: boolean;
    /**
     * the topic's epoch (`''` without history)
     */
    epoch: string;
    /**
     * the newest offset when the subscription took effect (0
     * without history)
     */
    offset: number;
    /**
     * the position subscribed from, or null (the first
     * time, or after the position was given up)
     */
    from: Position | null;
    /**
     * with a position: whether everything after it was
     * replayed (`false`: nothing was, and `onMissed` follows); absent without one
     */
    recovered?: boolean;
};
/**
 * A member of a topic's presence, as `presence [topic]` lists it: one connection (a user
 * in two tabs is two members with one info).
 */
export type Member = {
    /**
     * the member's connection: `NODE/ID` (`local/ID` without a cluster)
     */
    addr: string;
    /**
     * what it joined with (its `presence` member taken out)
     */
    info: any;
};
/**
 * A join or a leave: the params of `presence.join` and `presence.leave`
 * (`{"topic":"chat","addr":"b/7","info":{"user":"ana"}}`). A leave carries the info
 * the member joined with; a watcher is not told of its own join or leave.
 */
export type PresenceChange = {
    /**
     * the topic joined or left
     */
    topic: string;
    /**
     * the member's connection
     */
    addr: string;
    /**
     * what it joined with
     */
    info: any;
};
/**
 * How a ReconnectingPeer follows a topic (`link.topic(name, options)`).
 */
export type TopicOptions<T = any> = {
    /**
     * each publication's data (the
     * notification's `params.data`; on a topic without history, its params), in offset
     * order, once across reconnects
     */
    onData?: (data: T, info: TopicInfo) => void;
    /**
     * publications were lost: the position
     * could not be resumed (outside the server's history, or of an epoch it no longer
     * has), the offsets jumped, the server reported a gap (`$/gap`), or the topic keeps no
     * history and the link came back. Fetch the state afresh; data continues after
     * `info.offset` in `info.epoch`.
     */
    onMissed?: (info: TopicInfo) => void;
    /**
     * each answer to the
     * follower's subscribe (after every connect), before what it held is handed over
     */
    onSubscribed?: (subscription: Subscription) => void;
    /**
     * subscribing failed (an
     * error answer, an answer that is not a subscription, no answer in time), or a
     * notification is not `{"offset":N,"data":...}` (it is skipped). An error answer
     * leaves the topic unsubscribed on this connection; no answer in time closes the
     * connection, so that the next one subscribes again. A connection that closes while
     * the subscribe waits is not a failure: the next one subscribes.
     */
    onFailed?: (error: Error, topic: string) => void;
    /**
     * join the topic's presence with this (any JSON but
     * null, such as `{"user": "ana"}`; a function is asked again at every subscribe): the
     * subscribe call's third param, `[topic, position_or_null, info]`
     */
    info?: any | (() => any);
    /**
     * also hear who comes and goes: `presence: true` is
     * added to `info` (which must then be an object, or absent: `{}`), so the server sends
     * `presence.join` / `presence.leave` for the topic, and the follower keeps `members`
     * live (read again after every reconnect)
     */
    presence?: boolean;
    /**
     * another member joined (on any node)
     */
    onJoin?: (change: PresenceChange) => void;
    /**
     * another member left (it
     * unsubscribed, its connection ended, or its node went)
     */
    onLeave?: (change: PresenceChange) => void;
    /**
     * with `presence`: the members, each
     * time they change (after each read of `presence [topic]`, and each join and leave)
     */
    onPresence?: (members: Member[]) => void;
    /**
     * the method that lists the members
     */
    presenceMethod?: string;
    /**
     * the method that counts them
     */
    presenceCountMethod?: string;
    /**
     * the method that subscribes
     */
    method?: string;
    /**
     * the
     * subscribe call's params; default `[topic]`, or `[topic, {"epoch":E,"offset":K}]` with
     * a position (the form of the Rust `TopicMethods` and `push_ticker --history N`), and
     * `[topic, position_or_null, info]` with `info` or `presence`. The
     * answer must be theirs too: `{"epoch":E,"offset":K,"recovered"?:bool}`, or a boolean
     * for a topic without history.
     */
    params?: (topic: string, from: Position | null, info?: any) => Array<any> | object;
    /**
     * what `stop()` calls with
     * `[topic]` on the current connection; null: nothing
     */
    unsubscribeMethod?: string | null;
    /**
     * where to start the first time: a position kept from an
     * earlier page (`follower.position`, say in sessionStorage); default none
     */
    from?: Position;
    /**
     * notifications held while a subscribe answer is
     * awaited; past it the position is given up, the connection closed (4008), and the
     * next subscription is reported as missed
     */
    maxHeld?: number;
    /**
     * the same notifications' size (the length of
     * their params' JSON text, 64 MiB by default); past it, as past `maxHeld`
     */
    maxHeldBytes?: number;
    /**
     * the subscribe call's timeout; default the link's
     */
    timeoutMs?: number;
};
/**
 * What a follower needs from the ReconnectingPeer that owns it.
 */
export type FollowerHost = {
    /**
     * the link's default timeout
     */
    timeoutMs: () => number;
    /**
     * a throwing callback
     */
    report: (error: unknown, where: string) => void;
    /**
     * the open connection, if any
     */
    current: () => import("./peer.js").Peer | null;
    /**
     * stops routing to `follower`
     */
    forget: (follower: TopicFollower) => void;
    /**
     * a call on the link,
     * waiting for it if it is down
     */
    call: (method: string, params: any[]) => Promise<any>;
};
