import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;

import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.connect.mirror.MirrorClient;
import org.apache.kafka.connect.mirror.RemoteClusterUtils;

/**
 * Asks MM2's own client library about a cluster: what MirrorMaker 2 users' tools see.
 *
 * Usage: MirrorClientCheck <bootstrap> <source alias for translateOffsets | -> <group> <alias for hops>...
 * Prints one fact per line: "upstream a,b", "hops <alias> <n>", "offset <topic>-<partition> <offset>".
 */
public class MirrorClientCheck {
    public static void main(String[] args) throws Exception {
        Map<String, Object> props = new HashMap<>();
        props.put("bootstrap.servers", args[0]);
        try (MirrorClient client = new MirrorClient(props)) {
            System.out.println("upstream " + String.join(",", new TreeSet<>(client.upstreamClusters())));
            for (int i = 3; i < args.length; i++) {
                System.out.println("hops " + args[i] + " " + client.replicationHops(args[i]));
            }
        }
        if (args[1].equals("-")) {
            return;
        }
        Map<TopicPartition, OffsetAndMetadata> translated =
            RemoteClusterUtils.translateOffsets(props, args[1], args[2], Duration.ofSeconds(30));
        Map<String, Long> sorted = new TreeMap<>();
        translated.forEach((tp, om) -> sorted.put(tp.topic() + "-" + tp.partition(), om.offset()));
        sorted.forEach((tp, offset) -> System.out.println("offset " + tp + " " + offset));
    }
}
