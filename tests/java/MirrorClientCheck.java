import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;

import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.connect.mirror.MirrorClient;
import org.apache.kafka.connect.mirror.RemoteClusterUtils;

/**
 * Asks MM2's own client library about a cluster: what MirrorMaker 2 users' tools see.
 *
 * Usage: MirrorClientCheck <bootstrap> <source alias for translateOffsets | -> <group> <alias for hops>...
 * Prints one fact per line: "upstream a,b", "hops <alias> <n>", "offset <topic>-<partition> <offset>",
 * then "lag <topic>-<partition> <n>": a read_committed consumer's end offset there minus the offset.
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
        Map<String, Object> reader = new HashMap<>(props);
        reader.put("isolation.level", "read_committed");
        Map<TopicPartition, Long> ends;
        try (KafkaConsumer<byte[], byte[]> consumer =
                 new KafkaConsumer<>(reader, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            ends = consumer.endOffsets(translated.keySet(), Duration.ofSeconds(30));
        }
        Map<String, Long> offsets = new TreeMap<>();
        Map<String, Long> lags = new TreeMap<>();
        translated.forEach((tp, om) -> {
            offsets.put(tp.topic() + "-" + tp.partition(), om.offset());
            lags.put(tp.topic() + "-" + tp.partition(), ends.get(tp) - om.offset());
        });
        offsets.forEach((tp, offset) -> System.out.println("offset " + tp + " " + offset));
        lags.forEach((tp, lag) -> System.out.println("lag " + tp + " " + lag));
    }
}
